"""The Ray executor's decisions that need no cluster: where tasks go, how files land.

(tests/test_ray.py runs the whole executor on a real cluster.)
"""

from __future__ import annotations

from pathlib import Path

from rlwh.executors.ray_pool import accept, placements
from rlwh.executors.ray_remote import code_fingerprint
from rlwh.executors.task import Task


def _task(name: str, *paths: str) -> Task:
    return Task(name, print, (), 1, paths)


def _node(node_id: str, has: list[int], cpus: float = 1) -> dict:
    return {"node_id": node_id, "has": has, "cpus": cpus}


def test_tasks_prefer_the_nodes_that_hold_their_files_spread_among_them():
    tasks = [_task("a", "/d/a"), _task("b", "/d/b"), _task("c", "/d/c"), _task("d", "/d/d1", "/d/d2")]
    # inputs in task order: a=0, b=1, c=2, d=3,4
    nodes = [_node("n1", [0, 1, 2]), _node("n2", [0, 1, 2, 3]), _node("n3", [4])]
    chosen = placements(tasks, nodes)
    assert {chosen["a"], chosen["b"]} == {"n1", "n2"}  # both holders, round-robin
    assert chosen["c"] in ("n1", "n2")
    assert chosen["d"] is None  # no node holds both of its files: Ray decides


def test_files_on_every_node_or_none_leave_placement_to_ray():
    tasks = [_task("a", "/d/a"), _task("b", "/d/b"), _task("none")]
    nodes = [_node("n1", [0]), _node("n2", [0]), _node("head", [], cpus=0)]  # the head runs no tasks
    assert placements(tasks, nodes) == {"a": None, "b": None, "none": None}


def test_files_from_the_object_store_land_under_parts_and_paths_follow(tmp_path):
    parts = tmp_path / "parts"
    stale = parts / "t" / "killed-attempt"
    stale.mkdir(parents=True)
    (stale / "x.parquet").write_bytes(b"old")
    answer = {"dir": "/tmp/rlwh-t-abc", "node": "n3",
              "result": {"tables": {"ops": ["/tmp/rlwh-t-abc/ops/0.parquet"]}, "message": "/tmp/rlwh-t-abcdef is text",
                         "rows": [1, "/elsewhere/file"]},
              "files": {"ops/0.parquet": b"PAR1"}}
    result = accept(_task("t"), parts, answer)
    (landed,) = result["tables"]["ops"]
    assert Path(landed).read_bytes() == b"PAR1" and Path(landed).is_relative_to(parts / "t")
    assert result["message"] == "/tmp/rlwh-t-abcdef is text"  # a longer name is not under the folder
    assert result["rows"] == [1, "/elsewhere/file"]
    assert not stale.exists(), "a retried attempt's folder was kept"
    assert [p.name for p in (parts / "t").iterdir()] == [Path(landed).parent.parent.name]


def test_a_built_capture_from_the_object_store_points_at_its_landed_files(tmp_path):
    """A capture built on a node (a dataclass, not a dict) has its table paths moved too."""
    from rlwh.ingest.build import BuiltCapture

    built = BuiltCapture([], [("r", "a", 0, "c")], {"sources": "/tmp/rlwh-c-1/sources.parquet"})
    answer = {"dir": "/tmp/rlwh-c-1", "node": "n2", "result": built, "files": {"sources.parquet": b"PAR1"}}
    result = accept(_task("c"), tmp_path / "parts", answer)
    assert isinstance(result, BuiltCapture) and result.keys == built.keys
    assert Path(result.tables["sources"]).read_bytes() == b"PAR1"


def test_a_shared_folder_result_keeps_its_folder_and_drops_the_others(tmp_path):
    parts = tmp_path / "parts"
    kept, stale = parts / "t" / "good", parts / "t" / "killed"
    for folder in (kept, stale):
        folder.mkdir(parents=True)
        (folder / "p.parquet").write_bytes(b"x")
    result = accept(_task("t"), parts, {"dir": str(kept), "node": "n1", "result": {"tables": {"ops": [
        str(kept / "p.parquet")]}}})
    assert result == {"tables": {"ops": [str(kept / "p.parquet")]}}
    assert kept.exists() and not stale.exists()


def test_the_fingerprint_is_the_same_for_a_checkout_and_a_wheel_layout(tmp_path):
    checkout, wheel = tmp_path / "checkout", tmp_path / "wheel"
    for root, assets in ((checkout, checkout), (wheel, wheel / "rlwh" / "_assets")):
        (root / "rlwh").mkdir(parents=True)
        (root / "rlwh" / "parse.py").write_text("x = 1\n")
        (assets / "sql").mkdir(parents=True)
        (assets / "sql" / "views.sql").write_text("select 1;\n")
    same = [code_fingerprint(r / "rlwh", {"sql": a / "sql"})
            for r, a in ((checkout, checkout), (wheel, wheel / "rlwh" / "_assets"))]
    assert same[0] == same[1]
    (wheel / "rlwh" / "_assets" / "sql" / "views.sql").write_text("select 2;\n")
    assert code_fingerprint(wheel / "rlwh", {"sql": wheel / "rlwh" / "_assets" / "sql"}) != same[0]


class _FakeRay:
    """Just what ray_pool touches once its tasks are submitted; the first wait is a Ctrl-C."""

    def __init__(self):
        self.cancelled, self.shut_down, self.waits = [], False, 0

    def wait(self, refs, num_returns, timeout):
        self.waits += 1
        raise KeyboardInterrupt

    def cancel(self, ref, force):
        assert force
        self.cancelled.append(ref)

    def shutdown(self):
        self.shut_down = True


def _interrupted_pool(monkeypatch, tmp_path, connection_made: bool) -> _FakeRay:
    """ray_pool over two submitted tasks, Ctrl-C at its first wait; `connection_made`: whether
    ray_pool's connect made the connection (else the process already had one)."""
    import pytest

    from rlwh.config import Config
    from rlwh.executors import ray_pool as ray_executor

    fake = _FakeRay()
    node = {"node_id": "n1", "name": "127.0.0.1 (node n1)", "rlwh": {"version": "0", "fingerprint": "f", "at": "."},
            "sees_parts": True, "has": [], "cpus": 1}
    monkeypatch.setattr(ray_executor, "import_ray", lambda: fake)
    monkeypatch.setattr(ray_executor, "connect", lambda ray, address: connection_made)
    monkeypatch.setattr(ray_executor, "_mine", lambda: node["rlwh"])
    monkeypatch.setattr(ray_executor, "probe_nodes", lambda ray, parts, tasks: [node])
    monkeypatch.setattr(ray_executor, "submit", lambda ray, tasks, parts, nodes: {"ref-a": tasks[0], "ref-b": tasks[1]})
    pool = ray_executor.ray_pool([_task("a"), _task("b")], tmp_path, Config(db_path=tmp_path / "w.duckdb",
                                                                            executor="ray", ray_address="h:1"))
    with pytest.raises(KeyboardInterrupt):
        next(pool)
    assert fake.waits == 1  # nothing waits for the tasks' replies: that let Ray abort the driver
    return fake


def test_ctrl_c_on_its_own_connection_ends_the_job_without_cancelling(monkeypatch, tmp_path):
    """Shutting down ends the job, and Ray kills its tasks' workers; a cancel first raced
    the tasks' replies (Ray 2.60 aborted the driver)."""
    fake = _interrupted_pool(monkeypatch, tmp_path, connection_made=True)
    assert fake.shut_down and fake.cancelled == []


def test_ctrl_c_on_a_connection_it_was_given_cancels_every_task_and_keeps_the_connection(monkeypatch, tmp_path):
    fake = _interrupted_pool(monkeypatch, tmp_path, connection_made=False)
    assert sorted(fake.cancelled) == ["ref-a", "ref-b"] and not fake.shut_down


def test_an_attempt_that_starts_after_its_ingest_removed_parts_makes_nothing(monkeypatch, tmp_path):
    """A cancel is asynchronous: a task Ray had not stopped yet may start after the ingest
    gave up and removed parts/; it fails rather than make parts/ again."""
    import types

    import pytest

    from rlwh.executors import ray_remote

    fake_ray = types.SimpleNamespace(get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: "n1"))
    monkeypatch.setitem(__import__("sys").modules, "ray", fake_ray)
    ran = []
    with pytest.raises(FileNotFoundError):
        ray_remote.run_attempt(lambda out: ran.append(out), (), str(tmp_path / "parts"), "task-1", frozenset({"n1"}))
    assert ran == [] and list(tmp_path.iterdir()) == []
    (tmp_path / "parts").mkdir()
    answer = ray_remote.run_attempt(lambda out: ran.append(out), (), str(tmp_path / "parts"), "task-1",
                                    frozenset({"n1"}))
    assert Path(answer["dir"]).parent == tmp_path / "parts" / "task-1" and ran == [answer["dir"]]


def test_a_task_running_on_after_its_ingest_removed_parts_makes_no_folder_again(tmp_path):
    """Ray kills a stopped ingest's workers a moment after the driver removed parts/: a
    task still reading then fails to write, instead of making parts/ again (its sink makes
    its own folder, never the ones above it)."""
    import pyarrow as pa
    import pytest

    from rlwh.readers.base import TableSink
    from rlwh.safe_files import remove_folder

    parts = tmp_path / "w.duckdb.parts"
    attempt = parts / "task-1" / "attempt-1"
    attempt.mkdir(parents=True)
    sink = TableSink(attempt / "file-0")
    remove_folder(parts)
    with pytest.raises(FileNotFoundError):
        sink.write("cpu_ops", pa.table({"name": ["op"]}))
    with pytest.raises(FileNotFoundError):
        TableSink(attempt / "file-1")
    assert list(tmp_path.iterdir()) == []


def test_parts_left_half_removed_by_a_killed_ingest_are_swept_by_the_next(tmp_path):
    from rlwh.config import Config
    from rlwh.executors.run import fresh_parts_dir
    from rlwh.safe_files import REMOVING

    dead = 2**22 + 1  # above pid_max's default: no such process
    left = tmp_path / f"w.duckdb.parts{REMOVING}{dead}-0a1b2c3d" / "task-1"
    left.mkdir(parents=True)
    (left / "part.parquet").write_bytes(b"x")
    (tmp_path / "w.duckdb.parts" / "old-task").mkdir(parents=True)
    parts = fresh_parts_dir(Config(db_path=tmp_path / "w.duckdb"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.duckdb.parts"] and list(parts.iterdir()) == []
