"""Discovery and ingest on every real file in ../shared/fixtures/real, laid out as its
source project publishes it and as VeRL writes it (<save_path>/<step>/<role>/...)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, copy_fixture, read_db

from rlwh.ingest.discover import discover
from rlwh.ingest.runner import ingest

REAL = FIXTURES / "real"
ALEXNET = REAL / "ascend" / "msinsight-alexnet-level1"
KINETO = REAL / "kineto"
TRACES = sorted(p for p in KINETO.rglob("*") if p.is_file())


def _by_path(found):
    return {f.rel_path: f for f in found.files}


def test_every_real_kineto_trace_is_found_by_content(tmp_path):
    root = copy_fixture("real/kineto", tmp_path)
    files = _by_path(discover(root))
    assert len(TRACES) == 11
    for trace in TRACES:
        rel = str(trace.relative_to(KINETO))
        assert files[rel].kind == "torch_trace", rel
        assert files[rel].capture == rel  # its own path: two traces never merge
    # Ranks in names, as the real files spell them; none in a name means rank 0 unless the trace says.
    ranks = {rel: (f.rank_id, f.single_process_rank0) for rel, f in files.items()}
    assert ranks["hta/timeline_analysis/sampled_rank-0.json.gz"] == (0, False)
    assert ranks["hta/trace_filter/sampled_rank-1.json.gz"] == (1, False)
    assert ranks["hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"] == (0, False)
    assert ranks["hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"] == (0, False)
    assert ranks["hta/distributed_info_unavailable/distributed_info_not_found.json.gz"] == (None, True)


@pytest.mark.parametrize("name", ["trace.json.gz", "eager_trace.json.gz", "rank-0.json.gz", "bs_32_rank0.json.gz",
                                  "worker0.1623143089861.pt.trace.json.gz", "no_suffix", "trace.json"])
def test_any_name_plain_or_gzip(tmp_path, name):
    root = tmp_path / "run" / "actor"
    root.mkdir(parents=True)
    source = KINETO / "hta" / "call_stack" / "backward_thread.json"  # plain JSON, traceEvents first
    if name.endswith(".gz") or name == "no_suffix":
        source = KINETO / "hta" / "trace_filter" / "sampled_rank-1.json.gz"
    shutil.copy(source, root / name)
    [f] = discover(tmp_path / "run").files
    assert (f.kind, f.role, f.capture) == ("torch_trace", "actor", f"actor/{name}")


def test_a_json_object_that_is_no_trace_is_ignored_with_a_reason(tmp_path):
    root = copy_fixture("rl-insight-samples/summary_event_data", tmp_path)
    (root / "config.json").write_text(json.dumps({"schemaVersionX": 1, "lr": 0.1}))
    kinds = {f.rel_path: (f.kind, f.reason) for f in discover(root).files}
    assert kinds["config.json"] == ("ignored", 'a JSON object (first keys "schemaVersionX", "lr") that is no profile '
                                   "rlwh reads (a PyTorch trace holds traceEvents)")
    assert kinds["summary_event_dataframe_sample.json"][0] == "ignored"


def _verl_tree(root: Path) -> None:
    """VeRL's torch profiler: <save_path>/<step>/<role>/prof_rank-<k>.json.gz, two steps."""
    for step in (1, 2):
        for rank, source in ((0, "timeline_analysis/sampled_rank-0.json.gz"),
                             (1, "trace_filter/sampled_rank-1.json.gz")):
            folder = root / "profile" / str(step) / "actor_update"
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(KINETO / "hta" / source, folder / f"prof_rank-{rank}.json.gz")


def test_verl_layout_steps_roles_ranks(tmp_path):
    _verl_tree(tmp_path / "run")
    found = discover(tmp_path / "run").files
    keys = sorted((f.step, f.role, f.rank_id, f.capture) for f in found)
    assert keys == [(s, "actor_update", k, f"profile/{s}/actor_update/prof_rank-{k}.json.gz")
                    for s in (1, 2) for k in (0, 1)]


@pytest.mark.slow
def test_verl_layout_two_steps_of_one_rank_never_merge(tmp_path, config):
    _verl_tree(tmp_path / "run")
    summary = ingest(tmp_path / "run", config)
    assert summary.failed == 0
    con = read_db(config)
    ranks = con.execute("select step, rank_id, capture from ranks order by step, rank_id").fetchall()
    assert [(s, k) for s, k, _ in ranks] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert len({c for _, _, c in ranks}) == 4
    # One role span per capture: two short spans per rank, not one from step 1 to step 2.
    spans = con.execute("""select rank_id, count(*), count(distinct step), max(dur_ns)
                           from role_timeline group by rank_id order by rank_id""").fetchall()
    assert [(k, n, s) for k, n, s, _ in spans] == [(0, 2, 2), (1, 2, 2)]
    ops = con.execute("select step, count(*) from cpu_ops group by step order by step").fetchall()
    assert ops[0][0] == 1 and ops[1][0] == 2 and ops[0][1] == ops[1][1] > 0
    steps = con.execute("select distinct step from sources order by step").fetchall()
    assert steps == [(1,), (2,)]


def test_ascend_text_and_db_exports_as_published(tmp_path):
    root = copy_fixture("real/ascend/msinsight-alexnet-level1", tmp_path)
    files = _by_path(discover(root))
    for rank in (0, 1):
        capture = f"text/rank{rank}_ascend_pt"
        info = files[f"{capture}/profiler_info_{rank}.json"]
        assert (info.kind, info.rank_id, info.capture) == ("ascend_info", rank, capture)
        out = f"{capture}/ASCEND_PROFILER_OUTPUT"
        assert files[f"{out}/operator_memory.csv"].kind == "ascend_memory_csv"
        assert files[f"{out}/trace_view.json"].kind == "ascend_trace"
        assert files[f"{out}/kernel_details.csv"].kind == "ignored"
        assert files[f"{out}/kernel_details.csv"].reason.startswith("read with trace_view.json beside it, for the kind")
        assert {f.rank_id for f in files.values() if f.capture == capture} == {rank}
    # Every file of the tree has an entry.
    assert len(files) == sum(1 for p in root.rglob("*") if p.is_file())
    # The profiler's start from profiler_info's own clocks: end (epoch) - (end - start) (monotonic).
    info = json.loads((ALEXNET / "text/rank0_ascend_pt/profiler_info_0.json").read_text())
    start = info["end_info"]["collectionTimeEnd"] - (info["end_info"]["MonotonicTimeEnd"]
                                                    - info["start_info"]["start_monotonic"])
    assert files["text/rank0_ascend_pt/profiler_info_0.json"].capture_started_ns == start


@pytest.mark.slow
def test_ascend_capture_starts_at_its_earliest_event(tmp_path, config):
    root = copy_fixture("real/ascend/msinsight-alexnet-level1/text", tmp_path)
    assert ingest(root, config).failed == 0
    con = read_db(config)
    rows = con.execute("""
        select r.capture, r.capture_started_ns,
               least((select min(ts_ns) from cpu_ops o where o.capture = r.capture),
                     (select min(alloc_ns) from memory_records m where m.capture = r.capture),
                     (select min(start_ns) from ranges g where g.capture = r.capture),
                     (select min(ts_ns) from memory_usage u where u.capture = r.capture),
                     (select min(ts_ns) from npu_module_memory n where n.capture = r.capture)) as first_ns
        from ranks r order by capture""").fetchall()
    assert [c for c, _, _ in rows] == ["rank0_ascend_pt", "rank1_ascend_pt"]
    for capture, started, first in rows:
        assert started == first and first is not None, capture
        # before the profiler stopped (collectionTimeEnd), unlike the end time it used to take
        end = json.loads((root / capture / f"profiler_info_{capture[4]}.json").read_text())["end_info"]
        assert started < end["collectionTimeEnd"]


def test_mindspore_layout_and_a_rank_folder_above_the_capture(tmp_path):
    """MindSpore writes rank_<k>/<host>_<pid>_<ts>_ascend_ms; a rank<k> folder between the
    role folder and the capture is no role."""
    ms = tmp_path / "run" / "rank_1" / "node7_4242_20250109155000123_ascend_ms"
    shutil.copytree(ALEXNET / "text" / "rank1_ascend_pt", ms)
    (ms / "profiler_info_1.json").unlink()
    nested = tmp_path / "run" / "actor_update" / "rank0" / "20250109_155000_ascend_pt"
    shutil.copytree(ALEXNET / "text" / "rank0_ascend_pt", nested)
    files = discover(tmp_path / "run").files
    ms_files = [f for f in files if f.capture == "rank_1/node7_4242_20250109155000123_ascend_ms"]
    assert ms_files and {(f.role, f.rank_id, f.problem) for f in ms_files} == {("run", 1, None)}
    nested_files = [f for f in files if f.capture == "actor_update/rank0/20250109_155000_ascend_pt"]
    assert {(f.role, f.rank_id) for f in nested_files} == {("actor_update", 0)}


def test_dir_name_times_are_read_in_the_profilers_time_zone(tmp_path):
    """The name carries local time. A capture with profiler_info shows the zone (its
    name's time minus its epoch start); a capture without one is read in that zone."""
    info = json.loads((ALEXNET / "text/rank0_ascend_pt/profiler_info_0.json").read_text())
    start_ns = info["end_info"]["collectionTimeEnd"] - (info["end_info"]["MonotonicTimeEnd"]
                                                       - info["start_info"]["start_monotonic"])
    # 2025-01-09 07:48:03 UTC is 15:48:03 in UTC+8, which the profiler writes in the name.
    assert start_ns // 10**9 == 1736408883
    known = tmp_path / "run" / "actor" / "host_1_20250109154803456_ascend_pt"
    shutil.copytree(ALEXNET / "text" / "rank0_ascend_pt", known)
    unknown = tmp_path / "run" / "actor" / "rank1" / "host_2_20250109160000000_ascend_pt"
    shutil.copytree(ALEXNET / "text" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT", unknown / "ASCEND_PROFILER_OUTPUT")
    files = discover(tmp_path / "run").files
    started = {f.capture: f.capture_started_ns for f in files}
    assert started["actor/host_1_20250109154803456_ascend_pt"] == start_ns
    # 16:00:00 in UTC+8 is 08:00:00 UTC
    assert started["actor/rank1/host_2_20250109160000000_ascend_pt"] == 1736409600 * 10**9


def test_a_loose_trace_view_is_rank_0_and_says_so(tmp_path, config):
    root = copy_fixture("real/ascend/msprof-analyze-timeline", tmp_path)
    [f] = discover(root).files
    assert (f.kind, f.rank_id, f.capture) == ("ascend_trace", 0, "trace_view.json")
    ingest(root, config)
    status, message, rows = read_db(config).execute("select status, message, rows from sources").fetchone()
    assert status == "ok" and rows > 0 and "read as rank 0" in message


@pytest.mark.slow  # the session's real-corpus warehouse
def test_every_real_file_lands_in_sources(real_corpus):
    root, warehouse = real_corpus  # ingested once per session; failures fail the fixture
    con = duckdb.connect(str(warehouse), read_only=True)
    paths = {r[0]: r[1:] for r in con.execute("select path, kind, status, message, rank_id from sources").fetchall()}
    on_disk = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert set(paths) == on_disk
    for path, (kind, status, message, _) in paths.items():
        if kind == "ignored":
            assert status == "ignored" and message, path
        else:
            assert status in ("ok", "partial"), (path, status, message)
    single = "kineto/hta/distributed_info_unavailable/distributed_info_not_found.json.gz"
    assert paths[single][3] == 0 and "single-process" in paths[single][2]
    # A trace whose distributedInfo names its rank keeps it, whatever the file is called.
    assert paths["kineto/hta/trace_diff/control/control.json.gz"][3] == 3
    assert paths["ascend/msinsight-alexnet-level1/text/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"][:2] \
        == ("ignored", "ignored")
