"""rlwh.nightly: the regression rule, the baseline rule, exit codes, and whole nights."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from test_report import HOSTILE

from rlwh import synth
from rlwh.errors import RlwhError
from rlwh.nightly import (
    EXIT_CLEAN,
    EXIT_INGEST_FAILED,
    EXIT_NOTHING_FOUND,
    EXIT_PARTIAL,
    EXIT_REGRESSION,
    NightlyResult,
    RankMetrics,
    Regression,
    RunOutcome,
    find_regressions,
    load_state,
    previous_run,
    run_nightly,
    run_prefix,
)

KEY = ("actor_update", 0)


def test_peak_regresses_only_beyond_the_threshold():
    base = {KEY: RankMetrics(1000, 500)}
    assert find_regressions({KEY: RankMetrics(1100, 500)}, base, 10.0, 10.0) == []  # exactly +10%
    found = find_regressions({KEY: RankMetrics(1101, 500)}, base, 10.0, 10.0)
    assert [(g.metric, g.baseline, g.value) for g in found] == [("peak_live_bytes", 1000, 1101)]
    assert found[0].change_pct == pytest.approx(10.1)
    assert find_regressions({KEY: RankMetrics(500, 500)}, base, 10.0, 10.0) == []  # less memory is fine


def test_span_has_its_own_threshold():
    base = {KEY: RankMetrics(1000, 1000)}
    found = find_regressions({KEY: RankMetrics(1000, 1300)}, base, 10.0, 50.0)
    assert found == []
    found = find_regressions({KEY: RankMetrics(1000, 1300)}, base, 10.0, 20.0)
    assert [g.metric for g in found] == ["span_ns"]
    assert "+30.0%" in str(found[0]) and "actor_update rank 0" in str(found[0])


def test_missing_or_empty_baselines_are_not_compared():
    current = {KEY: RankMetrics(10**9, 10**9), ("rollout", 3): RankMetrics(10**9, None)}
    base = {KEY: RankMetrics(0, None), ("rollout", 3): RankMetrics(None, 5)}
    assert find_regressions(current, base, 10.0, 10.0) == []
    assert find_regressions(current, {}, 10.0, 10.0) == []


def test_run_prefix():
    assert run_prefix("grpo-0412") == "grpo"
    assert run_prefix("grpo_7b-2026_11_30") == "grpo_7b-2026_11"
    assert run_prefix("nightly") == "nightly"
    assert run_prefix("-x") == "-x"


def test_previous_run_is_the_latest_earlier_run_with_the_prefix():
    t = lambda h: datetime(2026, 11, 30, h)  # noqa: E731
    runs = [("grpo-1", t(1)), ("ppo-1", t(2)), ("grpo-2", t(3)), ("grpo-3", t(4)), ("grpo-x", t(5))]
    assert previous_run("grpo-3", runs) == "grpo-2"
    assert previous_run("grpo-1", runs) is None
    assert previous_run("ppo-1", runs) is None
    assert previous_run("grpo-x", runs) == "grpo-3"
    assert previous_run("unknown", runs) is None


def test_exit_codes():
    regression = Regression("r", 0, "span_ns", 1, 2, 100.0, 10.0)
    clean = RunOutcome("a", Path("a"), "ingested")
    regressed = RunOutcome("b", Path("b"), "ingested", regressions=[regression])
    failed = RunOutcome("c", Path("c"), "ingested", failed_files=1)
    result = lambda *runs: NightlyResult(Path("."), Path("index.html"), list(runs))  # noqa: E731
    assert result(clean).exit_code == EXIT_CLEAN == 0
    assert result(clean, regressed).exit_code == EXIT_REGRESSION == 3
    assert result(regressed, failed).exit_code == EXIT_INGEST_FAILED == 1
    assert result(RunOutcome("d", Path("d"), "error", message="busy")).exit_code == 1
    partial = RunOutcome("e", Path("e"), "ingested", partial_files=2)
    empty = RunOutcome("f", Path("f"), "empty")
    assert result(regressed, partial).exit_code == EXIT_PARTIAL == 5  # missing data wins over a regression
    assert result(partial, failed).exit_code == 1
    assert result(clean, regressed, empty).exit_code == EXIT_NOTHING_FOUND == 6
    assert result().exit_code == 6  # no run dir at all
    assert partial.problem() == "e: 2 file(s) loaded only in part"


def test_state_file_is_only_a_cache(tmp_path):
    (tmp_path / "nightly.json").write_text("{broken", encoding="utf-8")
    assert load_state(tmp_path / "index.html") == {}
    (tmp_path / "nightly.json").write_text('["a list"]', encoding="utf-8")
    assert load_state(tmp_path / "index.html") == {}


# ---------------------------------------------------------------- whole nights


def _profile(path: Path) -> Path:
    synth.write_ascend_profile(path, roles=("actor_update",), ranks=1, n_ops=200, n_allocs=200)
    return path


def _copy_scaled(source: Path, target: Path, factor: float) -> Path:
    """A copy of a run dir whose allocations are `factor` times larger: a memory regression."""
    shutil.copytree(source, target)
    for csv in target.rglob("operator_memory.csv"):
        lines = csv.read_text(encoding="utf-8").splitlines(keepends=True)
        scaled = [lines[0]]
        for line in lines[1:]:
            name, size, rest = line.split(",", 2)
            scaled.append(f"{name},{float(size) * factor:.1f},{rest}")
        csv.write_text("".join(scaled), encoding="utf-8")
    return target


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["warehouse", "dataset"])
def test_nights(config, tmp_path, mode):
    """The same nights whether the warehouse is a DuckDB file or a dataset's thin file."""
    if mode == "dataset":
        config = dataclasses.replace(config, dataset=tmp_path / "dataset")
    root = tmp_path / "nightly"
    first = _profile(root / "grpo-0001")

    night = run_nightly(config, root, None, None)
    assert night.exit_code == EXIT_CLEAN
    assert [(o.run, o.status, o.baseline) for o in night.runs] == [("grpo-0001", "ingested", None)]
    assert night.index == config.nightly_index and night.index.is_file()
    assert (config.reports_dir / "grpo-0001" / "index.html").is_file()
    assert (tmp_path / "dataset" / "current" / "_manifest.json").is_file() == (mode == "dataset")

    _copy_scaled(first, root / "grpo-0002", 1.5)
    night = run_nightly(config, root, None, None)
    assert night.exit_code == EXIT_REGRESSION
    by_run = {o.run: o for o in night.runs}
    assert by_run["grpo-0001"].status == "unchanged" and by_run["grpo-0001"].pages == []
    regressed = by_run["grpo-0002"]
    assert regressed.baseline == "grpo-0001"
    assert [(g.role, g.rank_id, g.metric) for g in regressed.regressions] == [("actor_update", 0, "peak_live_bytes")]
    assert regressed.regressions[0].change_pct == pytest.approx(50.0, abs=0.5)
    # nightly.json says the same (it said "no regression vs grpo-0001" beside the list)
    assert load_state(night.index)["runs"]["grpo-0002"]["checked"] == "1 regression(s) vs grpo-0001"
    index = night.index.read_text(encoding="utf-8")
    assert "1 regression(s)" in index
    assert index.index("grpo-0002") < index.index("grpo-0001")  # newest first
    assert 'href="grpo-0002/index.html"' in index
    # The regression links to the rank's memory timeline and to the page of the two runs side by side.
    compare = config.reports_dir / "grpo-0002" / "compare-grpo-0002-vs-grpo-0001.html"
    memory = config.reports_dir / "grpo-0002" / "memory_timeline" / "actor_update-rank0.html"
    assert compare.is_file() and memory.is_file()
    assert 'href="grpo-0002/compare-grpo-0002-vs-grpo-0001.html"' in index
    assert 'href="grpo-0002/memory_timeline/actor_update-rank0.html"' in index
    assert "1 regression(s) of grpo-0002 against grpo-0001" in compare.read_text(encoding="utf-8")

    night = run_nightly(config, root, None, None)  # nothing new
    assert night.exit_code == EXIT_CLEAN
    assert {o.status for o in night.runs} == {"unchanged"}
    assert "peak_live_bytes" in night.index.read_text(encoding="utf-8")  # earlier findings stay listed

    broken = _profile(root / "grpo-0003")
    next(broken.rglob("operator_memory.csv")).write_text("not a csv\n\x00\x01", encoding="utf-8")
    night = run_nightly(config, root, None, None)
    assert night.exit_code == EXIT_INGEST_FAILED
    assert [o.run for o in night.ingest_failures] == ["grpo-0003"]


@pytest.mark.slow
def test_explicit_baseline_and_out(config, tmp_path):
    root = tmp_path / "nightly"
    first = _profile(root / "base_run")
    _copy_scaled(first, root / HOSTILE.replace("/", "_"), 2.0)
    out = tmp_path / "elsewhere"
    night = run_nightly(config, root, out, "base_run")
    assert night.index == out / "index.html"
    assert night.exit_code == EXIT_REGRESSION
    hostile = next(o for o in night.runs if o.run != "base_run")
    assert hostile.baseline == "base_run" and hostile.regressions
    for page in out.rglob("*.html"):
        assert "<img" not in page.read_text(encoding="utf-8")
    with pytest.raises(RlwhError, match="--baseline"):
        run_nightly(config, root, out, "no-such-run")


def test_an_unknown_baseline_is_said_before_anything_is_ingested(config, tmp_path):
    """It was said after a night of ingesting every run dir."""
    root = tmp_path / "nightly"
    _profile(root / "grpo-0001")
    with pytest.raises(RlwhError, match="--baseline 'no-such-run' is neither a run of"):
        run_nightly(config, root, None, "no-such-run")
    assert not config.db_path.exists()


def test_missing_root_is_an_error(config, tmp_path):
    with pytest.raises(RlwhError, match="not found"):
        run_nightly(config, tmp_path / "absent", None, None)


def test_nothing_ingestible_is_an_ingest_failure_or_clean(config, tmp_path):
    root = tmp_path / "nightly"
    root.mkdir()
    assert run_nightly(config, root, None, None).exit_code == EXIT_NOTHING_FOUND  # an empty root
    (root / "grpo-0001" / "rank0").mkdir(parents=True)
    (root / "grpo-0001" / "rank0" / "prof_rank-0.pt.trace.json").write_text("{", encoding="utf-8")
    night = run_nightly(config, root, None, None)
    assert night.exit_code == EXIT_INGEST_FAILED
    assert night.ingest_failures[0].run == "grpo-0001"


def test_a_partial_run_is_loud_in_the_exit_status_and_the_index(config, tmp_path):
    root = tmp_path / "nightly"
    run = _profile(root / "grpo-0001")
    trace = next(run.rglob("trace_view.json"))
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])  # salvaged up to the cut
    night = run_nightly(config, root, None, None)
    assert night.exit_code == EXIT_PARTIAL
    assert [(o.run, o.partial_files, o.failed_files) for o in night.runs] == [("grpo-0001", 1, 0)]
    index = night.index.read_text(encoding="utf-8")
    assert "Data is missing: 1 run dir(s)" in index and "grpo-0001: 1 file(s) loaded only in part" in index
    assert "banner good" not in index and "No regression in tonight" not in index
    assert '<tr class="failed">\n<td class="text"><a href="grpo-0001/index.html">grpo-0001</a>' in index
    again = run_nightly(config, root, None, None)  # nothing new: the run's row stays red
    assert again.exit_code == EXIT_CLEAN
    assert '<tr class="failed">\n<td class="text"><a href="grpo-0001/index.html">grpo-0001</a>' in \
        again.index.read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_run_that_loaded_nothing_is_no_baseline(config, tmp_path):
    """Its regressions against a run none of whose files loaded were none, and the next
    run's real ones against the run before it went unseen."""
    root = tmp_path / "nightly"
    first = _profile(root / "grpo-0001")
    run_nightly(config, root, None, None)
    (root / "grpo-0002" / "rank0").mkdir(parents=True)
    (root / "grpo-0002" / "rank0" / "prof_rank-0.pt.trace.json").write_text("{", encoding="utf-8")
    assert run_nightly(config, root, None, None).exit_code == EXIT_INGEST_FAILED
    shutil.rmtree(root / "grpo-0002")
    _copy_scaled(first, root / "grpo-0003", 1.5)
    night = run_nightly(config, root, None, None)
    latest = next(o for o in night.runs if o.run == "grpo-0003")
    assert latest.baseline == "grpo-0001" and latest.regressions
    assert night.exit_code == EXIT_REGRESSION
