"""A progress line every `--progress-every` seconds (default 30; 0: none): the elapsed
time, how many tests are done of how many, and how many failed.

pytest -q prints dots and a percentage; on a slow machine nothing says how long the run
has taken or how far it is. The line is written by the process that prints the report:
under pytest-xdist the controller, which hears of every worker's tests, and otherwise
pytest itself. A test counts as done at its teardown report.
"""

from __future__ import annotations

import time

import pytest

_state: dict = {"start": None, "last": 0.0, "total": None, "done": 0, "failed": set()}
_config: dict = {"config": None}


def addoption(parser) -> None:
    """Called by conftest's pytest_addoption (this plugin is registered after parsing)."""
    parser.addoption("--progress-every", type=float, default=30.0, metavar="SECONDS",
                     help="print the elapsed time and the tests done every SECONDS (0: never; default 30)")


def _enabled(config) -> bool:
    return not hasattr(config, "workerinput") and config.getoption("--progress-every") > 0


def pytest_sessionstart(session):
    _state.update(start=time.monotonic(), last=time.monotonic(), total=None, done=0, failed=set())


def pytest_collection_finish(session):
    if not hasattr(session.config, "workerinput"):
        _state["total"] = len(session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Under xdist the controller collects nothing itself: every worker reports the same ids."""
    _state["total"] = len(ids)


def _line() -> str:
    elapsed = int(time.monotonic() - _state["start"])
    total = _state["total"]
    done = f"{_state['done']}/{total} tests done ({100 * _state['done'] // total}%)" if total else \
        f"{_state['done']} tests done"
    failed = f", {len(_state['failed'])} failed" if _state["failed"] else ""
    return f"[{elapsed // 60}:{elapsed % 60:02d} elapsed] {done}{failed}"


def pytest_runtest_logreport(report):
    if report.failed:
        _state["failed"].add(report.nodeid)
    if report.when == "teardown":
        _state["done"] += 1


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):
    """After the report of a test is printed (the controller's, under xdist)."""
    config = _config["config"]
    if config is None or not _enabled(config) or _state["start"] is None:
        return
    now = time.monotonic()
    if now - _state["last"] < config.getoption("--progress-every") or _state["done"] == _state["total"]:
        return  # not yet, or the last test: pytest's own summary follows
    _state["last"] = now
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
        reporter.write("\n")  # a line of dots is open (write_line only breaks a verbose line)
    reporter.write_line(_line())


def pytest_configure(config):
    _config["config"] = config
