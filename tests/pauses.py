"""Waiting for an rlwh process to stop itself at a stage (RLWH_TEST_PAUSE_AT, which
rlwh.safe_files.pause_for_test reads), so a test can kill it or let it go on exactly there."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest


def wait_stopped(proc: subprocess.Popen, stage: str, timeout: float = 60) -> None:
    """Return once `proc` is stopped at `stage`; fail the test where it ends first (its
    output shown) or does not get there within `timeout` s (then it is killed, its
    process group too where it leads one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WNOHANG | os.WUNTRACED)
        if pid and os.WIFSTOPPED(status):
            return
        if pid:  # it ended without stopping: reaped here, so tell Popen
            proc.returncode = os.waitstatus_to_exitcode(status)
            output = proc.stdout.read() if proc.stdout is not None else ""
            pytest.fail(f"the process never stopped at RLWH_TEST_PAUSE_AT={stage} (is the hook in place?); "
                        f"exit {proc.returncode}: {output[-2000:]}")
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    proc.wait(timeout=30)
    pytest.fail(f"the process did not reach stage {stage} within {timeout} s")
