"""The guard that keeps the tests to files in the repository is on, and fails a test that strays."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import path_guard
import pytest
from conftest import DATA, REPO


def test_the_guard_is_installed_and_sees_an_outside_open(tmp_path):
    assert path_guard.installed()
    outside = Path("/rlwh-path-guard-probe/shared/fixtures/file.json")  # beside no allowed root
    try:
        open(outside).close()
    except OSError:
        pass  # the file does not exist: the guard must see the attempt to open it all the same
    (tmp_path / "inside.txt").write_text("x")
    (tmp_path / "inside.txt").read_text()
    (DATA / "SOURCES").read_text()
    assert path_guard.take_violations() == [str(outside)]


@pytest.mark.slow
def test_a_test_that_reads_beside_the_repository_fails(tmp_path):
    """Run pytest on a test that opens ../shared-like paths: it must fail, naming the path."""
    probe = tmp_path / "test_probe.py"
    outside = Path("/rlwh-path-guard-probe/shared/fixtures/README.md")
    probe.write_text(textwrap.dedent(f"""
        def test_reads_outside():
            try:
                open({str(outside)!r}).close()
            except OSError:
                pass

        def test_reads_inside(tmp_path):
            (tmp_path / "a").write_text("x")
    """))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "path_guard", "-p", "no:cacheprovider",
                           str(probe)], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO / "tests"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout
    assert "opened files outside the repository" in proc.stdout and str(outside) in proc.stdout
