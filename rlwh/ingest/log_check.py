"""The seed's checks of a VeRL training log (RL-Insight's DataEnum.VERL_LOG rules), for `rlwh check`.

A log passes when it exists and is not empty, is a VeRL log (`verl` in its name or in
its first 64 KiB, any case), and holds every required key in its first 2 MiB (the list is
[verl_log] required_keys in warehouse.toml, so a team can loosen or tighten it). These
rules judge the log only: a log that fails them is still ingested for what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlwh.config import DEFAULT_REQUIRED_KEYS

IDENTITY_BYTES = 64 << 10
KEYS_BYTES = 2 << 20


@dataclass
class LogCheck:
    """The verdict on one log: the failed rules, each one line naming the file."""

    path: str
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def check_log(path: Path, shown: str, required_keys: tuple[str, ...] = DEFAULT_REQUIRED_KEYS) -> LogCheck:
    """Run the seed's rules on the log at `path` (`shown`: its name in messages)."""
    result = LogCheck(shown)
    try:
        if not path.is_file():
            result.failures.append(f"{shown}: no such file")
            return result
        with open(path, "rb") as f:
            head = f.read(KEYS_BYTES)
    except OSError as exc:
        result.failures.append(f"{shown}: cannot read it: {exc.strerror}")
        return result
    if not head:
        result.failures.append(f"{shown}: empty file")
        return result
    if "verl" not in path.name.lower() and b"verl" not in head[:IDENTITY_BYTES].lower():
        result.failures.append(f"{shown}: not a VeRL log: no 'verl' in its name or its first 64 KiB")
    text = head.decode("utf-8", "replace")
    missing = [key for key in required_keys if key not in text]
    if missing:
        result.failures.append(f"{shown}: required keys missing from its first 2 MiB: {', '.join(missing)}")
    return result


def format_log_checks(checks: list[LogCheck]) -> list[str]:
    """Lines for the terminal: PASS or FAIL per log, one line per failed rule."""
    lines = []
    for c in sorted(checks, key=lambda c: c.path):
        if c.passed:
            lines.append(f"  PASS  {c.path}")
        lines += [f"  FAIL  {failure}" for failure in c.failures]
    return lines
