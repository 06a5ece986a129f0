"""The Python API from a plain script (no main guard), as a notebook user would call it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, copy_fixture


def _python(script: str, cwd, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env["PYTHONPATH"] = str(REPO)
    (cwd / "script.py").write_text(textwrap.dedent(script))
    try:
        return subprocess.run([sys.executable, "script.py"], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the script hung for {timeout} s: {exc.stderr}")


@pytest.mark.slow
def test_ingest_and_connect_from_a_script_without_a_main_guard(tmp_path):
    profile = copy_fixture("torch_profile", tmp_path)
    expected_ops = 0
    for trace in sorted(profile.rglob("*.json.gz")):
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        expected_ops += sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    proc = _python(f"""
        import rlwh

        with open("imported", "a") as f:  # each run of this top level leaves a line
            f.write("x\\n")
        summary = rlwh.ingest({str(profile)!r}, db="w.duckdb", run="r1", workers=2)
        print("files", len(summary.results), "failed", summary.failed)
        con = rlwh.connect("w.duckdb")
        print("ops", con.sql("select count(*) from cpu_ops where run = 'r1'").fetchall()[0][0])
        frame = con.sql("select run, role, rank_id from ranks order by role, rank_id").df()
        print("frame", type(frame).__name__, len(frame), list(frame.columns))
        try:
            con.execute("create table t (x int)")
        except Exception as exc:
            print("read-only:", type(exc).__name__)
    """, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "files 4 failed 0"
    assert lines[1] == f"ops {expected_ops}"
    assert lines[2] == "frame DataFrame 4 ['run', 'role', 'rank_id']"
    assert lines[3].startswith("read-only:")
    assert (tmp_path / "imported").read_text() == "x\n", "a parse worker ran the script again"


def test_spawned_workers_do_not_run_the_callers_script(tmp_path):
    """The pool's start (rlwh.clean_main): a spawned process inside the block
    does not import the script; one outside it does (what broke the pool)."""
    proc = _python("""
        import multiprocessing
        import os

        from rlwh.clean_main import main_left_out

        with open("imported", "a") as f:
            f.write(f"{os.getpid()}\\n")
        if multiprocessing.parent_process() is None:
            ctx = multiprocessing.get_context("spawn")
            with main_left_out():
                p = ctx.Process(target=os.getpid)
                p.start()
            p.join()
            print("inside", p.exitcode)
    """, tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["inside", "0"]
    assert len((tmp_path / "imported").read_text().split()) == 1


def test_import_rlwh_is_cheap_and_names_the_api(tmp_path):
    proc = _python("""
        import sys
        import rlwh

        print(sorted(n for n in dir(rlwh) if not n.startswith("_")))
        print(sorted(m for m in ("duckdb", "pyarrow", "click", "rlwh.api") if m in sys.modules))
        print(callable(rlwh.ingest), callable(rlwh.connect), callable(rlwh.check))
        import rlwh.ingest.runner  # the subpackage import leaves rlwh.ingest callable
        print(callable(rlwh.ingest))
    """, tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["['check', 'connect', 'ingest']", "[]", "True True True", "True"]


def test_python_dash_m_rlwh_runs_the_cli(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env["PYTHONPATH"] = str(REPO)
    root = copy_fixture("rl-insight-samples/verl_data", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "rlwh", "check", str(root / "bad_exist_empty_verl.log")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout and "empty file" in proc.stdout


def test_the_api_in_this_process_gives_what_the_commands_give(tmp_path):
    """rlwh.ingest (the package called), rlwh.connect and rlwh.check in this process, the
    fast loop's counterpart of the script above: the summary lists the files check lists,
    and the read-only connection holds the rows the summary counts."""
    import duckdb

    import rlwh

    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = tmp_path / "w.duckdb"
    summary = rlwh.ingest(profile, db=db, run="r1", workers=1)
    assert summary.failed == 0 and summary.rows > 0
    verdicts = rlwh.check(profile).verdicts()
    assert set(verdicts) == {r.rel_path for r in summary.results + summary.ignored}
    assert {path for path, (status, _) in verdicts.items() if status == "ignored"} == {
        r.rel_path for r in summary.ignored}
    con = rlwh.connect(db)
    try:
        loaded = con.execute("select sum(rows) from sources where run = 'r1' and status in ('ok', 'partial')")
        assert loaded.fetchone()[0] == summary.rows
        with pytest.raises(duckdb.Error):
            con.execute("create table t (x int)")
    finally:
        con.close()
