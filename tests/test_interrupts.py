"""Ctrl-C ends `python -m rlwh` with status 130 wherever the KeyboardInterrupt is raised,
also inside code run from a string: namedtuple builds its class with `eval`, so a Ctrl-C
while a module imports can land there (CI saw `-2` once in 300 interrupts), and CPython
then ends a `-m` process by SIGINT even though the CLI caught and reported it; and while a
DuckDB statement runs on a thread beside the main one, which must stop before the command exits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# A command of the real CLI group whose Ctrl-C lands inside a string eval, as namedtuple's does.
_COMMAND = '''
import os, signal
from rlwh import interrupts
from rlwh.cli import cli

@cli.command()
def interrupted_in_eval():
    eval("os.kill(os.getpid(), signal.SIGINT) or sum(range(10**7))")

interrupts.defer()
cli()
'''


def _interrupted(tmp_path: Path, module: str, source: str, command: str, timeout: float) -> None:
    """Run `python -m <module> <command>` (`source`, a script of the real CLI group) and hold
    it to what a Ctrl-C must give: exit 130 and the one line "Aborted!", no traceback."""
    (tmp_path / f"{module}.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    done = subprocess.run([sys.executable, "-m", module, command], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=timeout)
    assert done.returncode == 130, (done.returncode, done.stderr[-2000:])
    assert done.stderr.startswith("Aborted!") and "Traceback" not in done.stderr, done.stderr


def test_ctrl_c_inside_a_string_eval_still_exits_130(tmp_path):
    _interrupted(tmp_path, "interrupted_cli", _COMMAND, "interrupted-in-eval", timeout=60)


def test_python_m_rlwh_is_the_cli(monkeypatch, capsys):
    """rlwh/__main__.py (`python -m rlwh`, the `rlwh` command's start-up) runs the CLI: here,
    in this process, `--help` prints the usage and exits 0; SIGINT's handler is put back."""
    import runpy
    import signal

    monkeypatch.setattr(sys, "argv", ["rlwh", "--help"])
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exited:
            runpy.run_module("rlwh", run_name="__main__", alter_sys=True)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: ") and "rlwh: every rank" in out and "ingest" in out


# A command whose Ctrl-C lands while the main thread waits for a statement on a thread beside
# it (an ingest's second lane, a dataset's second COPY): the statement runs for minutes
# unless stopped.
_BESIDE = '''
import os, signal, threading
import duckdb
from rlwh import interrupts
from rlwh.cli import cli

def count_forever(cursor):
    try:
        cursor.execute("select count(*) from range(10000000000000) t(i) where i % 7 = 3")
    except duckdb.InterruptException:
        pass

@cli.command()
def interrupted_beside():
    con = duckdb.connect()
    beside = interrupts.StatementThread(con.cursor(), count_forever, name="beside")
    try:
        beside.start()
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        beside.finish()
    finally:
        beside.close()
        con.close()

interrupts.defer()
cli()
'''


def test_ctrl_c_while_a_statement_runs_beside_stops_it_and_exits_130(tmp_path):
    """In CPython 3.11 a Ctrl-C landing in Thread.join(timeout) marks the joined thread as
    ended while it runs; the command then exited under its DuckDB statement, and DuckDB
    aborted the process (exit -6, "FATAL: exception not rethrown") or a cursor closed under
    it crashed (-11). StatementThread stops the statement first: one line, exit 130."""
    _interrupted(tmp_path, "beside_cli", _BESIDE, "interrupted-beside", timeout=120)


def test_a_statement_thread_that_never_started_is_finished_and_closed_at_once():
    """A failure before the thread starts (a dataset's second cursor failing its first
    statement) still runs the caller's finally: finish() and stop() must not wait for an
    end that never comes, and close() closes the cursor."""
    import duckdb

    from rlwh import interrupts

    con = duckdb.connect()
    try:
        never = interrupts.StatementThread(con.cursor(), lambda cursor: None, name="never")
        waiting = threading.Thread(target=lambda: (never.stop(), never.finish()), daemon=True)
        waiting.start()
        waiting.join(10)
        assert not waiting.is_alive(), "stop() or finish() waits for a thread that never started"
        never.close()
        with pytest.raises(duckdb.ConnectionException):
            never.cursor.execute("select 1")
    finally:
        con.close()
