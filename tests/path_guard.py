"""Fail any test that opens a file outside the repository, the temp dirs and the Python install.

A test that reads ../shared (or a home dir, or another checkout) passes on the machine it
was written on and fails on a fresh clone. An audit hook sees every open() that Python
makes in this process; opens outside the allowed roots are recorded, and the test that
made them fails (conftest.py checks after each test). Audit hooks cannot be removed, so
once installed the guard cannot be switched off; `installed()` lets a test prove it is on.
Files opened by subprocesses, DuckDB or Chromium are not seen: tests hand those their
paths, and the paths come from tests/data copied into a temp dir.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

# The system's own files: the interpreter, shared libraries, fonts, time zones, locales.
SYSTEM_ROOTS = ("/usr", "/lib", "/lib64", "/etc", "/dev", "/proc", "/sys", "/opt/conda")

_state: dict = {"installed": False, "roots": (), "violations": []}


def _allowed_roots(repo: Path) -> tuple[str, ...]:
    roots = {str(repo), tempfile.gettempdir(), *SYSTEM_ROOTS,
             sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *site.getsitepackages(), site.getusersitepackages(),
             *(p for p in sysconfig.get_paths().values())}
    for env in ("TMPDIR", "TEMP", "TMP"):
        if os.environ.get(env):
            roots.add(os.environ[env])
    expanded = set()
    for root in roots:
        expanded.add(os.path.abspath(root))
        expanded.add(os.path.realpath(root))
    return tuple(sorted(r.rstrip("/") + "/" for r in expanded if r))


def _inside(path: str) -> bool:
    return any(path.startswith(root) or path + "/" == root for root in _state["roots"])


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not _state["roots"]:
        return
    target = args[0]
    if isinstance(target, int):
        return  # an fd already open
    try:
        path = os.path.abspath(os.fsdecode(target))
    except (TypeError, ValueError):
        return
    if _inside(path) or _inside(os.path.realpath(path)):
        return
    _state["violations"].append(path)


def install(repo: Path) -> None:
    """Install the hook once per process (audit hooks stay until the interpreter exits)."""
    _state["roots"] = _allowed_roots(repo)
    if not _state["installed"]:
        sys.addaudithook(_hook)
        _state["installed"] = True


def installed() -> bool:
    return _state["installed"] and bool(_state["roots"])


def take_violations() -> list[str]:
    """The paths opened outside the allowed roots since the last call (and forget them)."""
    found, _state["violations"] = _state["violations"], []
    return found


REPO = Path(__file__).resolve().parent.parent


def _message(paths: list[str]) -> str:
    shown = "\n  ".join(dict.fromkeys(paths))
    return ("opened files outside the repository and the temp dirs (a fresh clone has none of "
            f"them; put real files in tests/data, see tests/data/SOURCES):\n  {shown}")


# The pytest side, imported by tests/conftest.py (and usable as `-p path_guard`).

def pytest_configure(config) -> None:
    install(REPO)


def _fail_if_outside(report) -> None:
    found = take_violations()
    if found and report.outcome == "passed":
        report.outcome = "failed"
        report.longrepr = _message(found)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test phase (setup, call, teardown) that opened an outside file fails, naming the paths."""
    outcome = yield
    _fail_if_outside(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """So does collecting a module that opens one at import."""
    outcome = yield
    _fail_if_outside(outcome.get_result())
