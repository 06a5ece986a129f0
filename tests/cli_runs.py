"""`rlwh check` and `rlwh ingest` as processes of their own, each under a timeout (a hang
fails the test instead of holding the suite), and the verdict each gives every file:
check's from its report (a FAIL, PART or skip line names the file first; an ignored file
is listed by its path), ingest's from the `sources` rows it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parent.parent
_LABELS = {"FAIL": "failed", "PART": "partial", "skip": "ignored"}


def rlwh(args: list[str], folder: Path, timeout: float = 20) -> subprocess.CompletedProcess:
    """`rlwh <args>` run in `folder` with one parse worker (a settings file of its own)."""
    settings = folder / "rlwh-test.toml"
    settings.write_text("[ingest]\nworkers = 1\nlock_timeout = 5\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env.update(PYTHONPATH=str(REPO), RLWH_CONFIG=str(settings))
    try:
        return subprocess.run([sys.executable, "-m", "rlwh", *args], capture_output=True, text=True, env=env,
                              cwd=folder, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`rlwh {' '.join(args)}` still ran after {timeout} s: a hang")


def ingested(profile: Path, db: Path, timeout: float = 20) -> dict[str, tuple[str, str | None]]:
    """Ingest `profile` into `db`; each file's (status, message) from `sources`, by its path
    in the profile dir (a message names the file by that path too)."""
    done = rlwh(["ingest", str(profile), "--db", str(db), "-q"], db.parent, timeout)
    assert db.exists(), done.stdout + done.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("select path, status, message from sources").fetchall()
    finally:
        con.close()
    absolute = f"{profile.resolve()}/"
    return {path: (status, message and message.replace(absolute, "")) for path, status, message in rows}


def checked(profile: Path, paths, timeout: float = 20) -> dict[str, tuple[str, str | None]]:
    """`rlwh check` of `profile`: the verdict of each of `paths` (relative to it), read
    from its report; a file it names in no problem and lists as no ignored file is ok.
    An ignored file's reason is not told (the report counts the reasons apart), nor the
    ignored files past the report's first 20."""
    done = rlwh(["check", str(profile)], profile.parent, timeout)
    out = {path: ("ok", None) for path in paths}
    in_ignored = False
    for line in done.stdout.splitlines():
        if line.startswith("ignored files ("):
            in_ignored = True
            continue
        if in_ignored and line.startswith(" " * 10) and line.strip() in out:
            out[line.strip()] = ("ignored", None)  # the report lists the reasons apart from the paths
            continue
        in_ignored = in_ignored and line.startswith("  ")
        label, _, message = line.strip().partition("  ")
        if label in _LABELS:
            path = message.split(": ", 1)[0]
            if path in out and out[path][0] == "ok":
                out[path] = (_LABELS[label], message)
    return out
