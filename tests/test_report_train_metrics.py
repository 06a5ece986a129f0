"""Training-log metrics in nightly, compare and the report: the regression rule on chosen
log metrics, and the page that draws them over steps with the profiled steps marked."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

import pytest
from jinja2 import meta

from rlwh import report
from rlwh.config import Config
from rlwh.ingest.runner import ingest
from rlwh.nightly import EXIT_REGRESSION, load_state, run_nightly
from rlwh.report.compare_runs import compare_runs, find_train_regressions
from rlwh.synth import timelines as synth_timelines

METRICS = ("timing_s/step", "perf/throughput", "perf/max_memory_allocated_gb", "response_length/mean")


def _config(tmp_path: Path, **overrides) -> Config:
    return Config(db_path=tmp_path / "w.duckdb", workers=1, lock_timeout=5, reports_dir=tmp_path / "reports",
                  nightly_root=tmp_path / "nightly", nightly_index=tmp_path / "reports" / "index.html", **overrides)


def write_log(path: Path, figures: list[dict]) -> Path:
    """A console log, one record per step (steps from 1), as VeRL prints them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["Training from scratch"]
    for step, record in enumerate(figures, start=1):
        lines.append(f"step:{step} - " + " - ".join(f"{k}:np.float64({v})" for k, v in record.items()))
    path.write_text("\n".join(lines) + "\n")
    return path


def figures(step_s: list[float], throughput: list[float]) -> list[dict]:
    return [{"timing_s/step": s, "perf/throughput": t, "perf/max_memory_allocated_gb": 40.0,
             "response_length/mean": 500.0, "actor/entropy": 0.3} for s, t in zip(step_s, throughput)]


BASE = figures([10.0, 11.0, 12.0, 50.0], [1000.0, 990.0, 1010.0, 100.0])
SLOW = figures([13.0, 14.0, 15.0, 13.5], [800.0, 790.0, 805.0, 810.0])


def test_rule_directions_and_thresholds():
    config = Config()
    base = {"timing_s/step": 100.0, "perf/throughput": 1000.0, "response_length/mean": 0.0}
    assert find_train_regressions({"timing_s/step": 110.0, "perf/throughput": 900.0}, base, config) == []  # exactly 10%
    found = find_train_regressions({"timing_s/step": 111.0, "perf/throughput": 899.0, "response_length/mean": 5.0},
                                   base, config)
    assert [(g.metric, g.higher_is_better) for g in found] == [("timing_s/step", False), ("perf/throughput", True)]
    assert found[1].change_pct == pytest.approx(-10.1)
    assert "perf/throughput median 1000 -> 899 (-10.1%, higher is better, threshold 10%)" in str(found[1])
    # Faster steps and more throughput are no regression; a metric not chosen is never compared.
    assert find_train_regressions({"timing_s/step": 50.0, "perf/throughput": 2000.0}, base, config) == []
    narrow = dataclasses.replace(config, train_metrics=("perf/throughput",), train_metric_pct=50.0)
    assert find_train_regressions({"timing_s/step": 500.0, "perf/throughput": 600.0}, base, narrow) == []


@pytest.mark.slow
def test_compare_flags_log_medians(tmp_path):
    config = _config(tmp_path)
    for run, records in (("job-a", BASE), ("job-b", SLOW)):
        write_log(tmp_path / run / "train.log", records)
        ingest(tmp_path / run, config, run=run)
    result = compare_runs(config, "job-a", "job-b")
    medians = {run: {m: statistics.median(r[m] for r in records) for m in METRICS}
               for run, records in (("job-a", BASE), ("job-b", SLOW))}
    expected = []
    for m in METRICS:
        change = (medians["job-b"][m] - medians["job-a"][m]) / medians["job-a"][m] * 100
        if (-change if m == "perf/throughput" else change) > 10:
            expected.append((m, medians["job-a"][m], medians["job-b"][m]))
    assert expected == [("timing_s/step", 11.5, 13.75), ("perf/throughput", 995.0, 802.5)]
    assert [(g.metric, g.baseline, g.value) for g in result.regressions] == expected


@pytest.mark.slow
def test_nightly_exits_3_on_a_log_regression(tmp_path):
    config = _config(tmp_path)
    root = config.nightly_root
    write_log(root / "grpo-1" / "wandb" / "run-20260101_000000-a" / "files" / "output.log", BASE)
    assert run_nightly(config, root, None, None).exit_code == 0
    write_log(root / "grpo-2" / "train.log", SLOW)
    night = run_nightly(config, root, None, None)
    assert night.exit_code == EXIT_REGRESSION
    (outcome,) = [o for o in night.runs if o.run == "grpo-2"]
    assert [str(g).split(" median")[0] for g in outcome.regressions] == [
        "training log: timing_s/step", "training log: perf/throughput"]
    state = load_state(night.index)
    assert state["runs"]["grpo-2"]["baseline"] == "grpo-1"
    assert any("training log: timing_s/step" in text for text in state["runs"]["grpo-2"]["regressions"])
    assert "a training log's median of timing_s/step" in state["last_nightly"]["rule"]


def test_page_draws_metrics_over_steps_with_profiled_steps_marked(tmp_path, monkeypatch):
    config = _config(tmp_path)
    profile = tmp_path / "grpo"
    write_log(profile / "train.log", BASE + [{"timing_s/step": float("nan"), "perf/throughput": 1.0}])
    # The profile captured step 3 (VeRL's <save_path>/<step>/ folder) and step 9 (no log record).
    for step in (3, 9):
        synth_timelines.write_torch_trace(profile / "actor" / str(step) / "prof_rank-0.pt.trace.json.gz",
                                          rank=0, world_size=1)
    ingest(profile, config)
    seen = {}
    original = report.render.render_page

    def spy(template, context):
        seen.setdefault(template, context)
        return original(template, context)

    monkeypatch.setattr(report.render, "render_page", spy)
    pages = report.build_report(config, out=tmp_path / "out")
    page_path = tmp_path / "out" / "grpo" / "train_metrics.html"
    assert page_path in pages
    context = seen["train_metrics.html"]
    assert context.profiled_steps == [3, 9]
    assert [f.title for f in context.figures] == list(METRICS)
    data = json.loads(str(context.figures[0].data))
    line = data["data"][0]
    assert line["x"] == [1, 2, 3, 4] and line["y"] == [r["timing_s/step"] for r in BASE]  # the NaN step left out
    assert "1 NaN or infinite value(s) not drawn" in context.figures[0].note
    assert [s["x0"] for s in data["layout"]["shapes"]] == [3, 9]
    assert data["data"][-1]["name"] == "profiled step" and data["data"][-1]["x"] == [3, 9]
    # The context covers its template, every field has help, and the summary links the page.
    env = report.environment()
    source = env.loader.get_source(env, "train_metrics.html")[0]
    base_vars = meta.find_undeclared_variables(env.parse(env.loader.get_source(env, "base.html")[0]))
    names = {f.name for f in dataclasses.fields(context)}
    assert meta.find_undeclared_variables(env.parse(source)) | base_vars <= names
    assert all(f.metadata.get("help") for f in dataclasses.fields(context))
    assert re.search(r'href="train_metrics.html"', (tmp_path / "out" / "grpo" / "index.html").read_text())


def test_no_log_no_page(tmp_path):
    config = _config(tmp_path)
    synth_timelines.write_torch_trace(tmp_path / "p" / "prof_rank-0.pt.trace.json.gz", rank=0, world_size=1)
    ingest(tmp_path / "p", config)
    pages = report.build_report(config, out=tmp_path / "out")
    assert not any(p.name == "train_metrics.html" for p in pages)
