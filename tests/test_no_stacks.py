"""A capture profiled without call stacks says so (issue 41 item 4): its sources message, `rlwh
summary` and the report name it and how to record stacks (with_stack=True), and a capture
that has stacks is never named. Expectations come from the raw files: the cpu_op events, and
whether any carries a non-empty "Call stack" or the trace holds python_function events."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import DATA, SAMPLES

from rlwh.cli import cli
from rlwh.ingest.runner import ingest
from rlwh.report.summary import summarize

REAL = DATA / "real"
# torch_npu trace_view.json recorded with with_stack off; a PyTorch (ROCm) trace without
# stacks; and, with stacks, an Ascend capture ("Call stack" args) and a PyTorch trace
# (python_function events).
NPU_NO_STACKS = REAL / "ascend" / "msprof-analyze-timeline" / "trace_view.json"
TORCH_NO_STACKS = REAL / "kineto" / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
NPU_STACKS = SAMPLES / "memory_data" / "20260526_085155_ascend_pt"
TORCH_STACKS = DATA / "torch_profile" / "actor_update" / "prof_rank-0.pt.trace.json.gz"


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _raw(path: Path) -> tuple[int, bool]:
    """(cpu_op events, whether the trace records any call stack), from the file itself."""
    events = _events(path)
    ops = sum(1 for e in events if e.get("cat") == "cpu_op")
    stacked = any(e.get("cat") == "python_function" or (e.get("args") or {}).get("Call stack") for e in events)
    return ops, stacked


def _profile(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    (root / "npu").mkdir(parents=True)
    shutil.copy(NPU_NO_STACKS, root / "npu" / "trace_view.json")
    (root / "rollout").mkdir()
    shutil.copy(TORCH_NO_STACKS, root / "rollout" / TORCH_NO_STACKS.name)
    shutil.copytree(NPU_STACKS, root / "actor" / NPU_STACKS.name)
    shutil.copy(TORCH_STACKS, root / "actor" / TORCH_STACKS.name)
    return root


def test_the_raw_files_are_what_the_test_says():
    assert [_raw(p)[1] for p in (NPU_NO_STACKS, TORCH_NO_STACKS, TORCH_STACKS)] == [False, False, True]
    assert _raw(NPU_STACKS / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")[1]


@pytest.mark.slow
def test_sources_summary_and_report_say_a_capture_has_no_call_stacks(tmp_path, config):
    root = _profile(tmp_path)
    assert ingest(root, config, run="run").failed == 0
    con = duckdb.connect(str(config.db_path), read_only=True)
    messages = dict(con.execute("select path, coalesce(message, '') from sources where run = 'run'").fetchall())
    con.close()
    npu_ops, _ = _raw(NPU_NO_STACKS)
    torch_ops, _ = _raw(TORCH_NO_STACKS)
    npu_message = messages["npu/trace_view.json"]
    assert "no call stacks" in npu_message and "torch_npu.profiler.profile(with_stack=True)" in npu_message
    assert f"({npu_ops:,} ops, none with a stack)" in npu_message
    torch_message = messages[f"rollout/{TORCH_NO_STACKS.name}"]
    assert "no call stacks" in torch_message and "torch.profiler.profile(with_stack=True)" in torch_message
    assert f"({torch_ops:,} ops, none with a stack)" in torch_message
    stacked = [p for p in messages if p.startswith("actor/")]
    assert stacked and not any("no call stacks" in messages[p] for p in stacked)

    section = next(s for s in summarize(config, "run").sections if s.title.startswith("Captures without call stacks"))
    cols = section.result.columns
    rows = {r[cols.index("capture")]: r for r in section.result.rows}
    assert set(rows) == {"npu/trace_view.json", f"rollout/{TORCH_NO_STACKS.name}"}
    assert rows["npu/trace_view.json"][cols.index("ops")] == npu_ops
    how = cols.index("record_stacks_with")
    assert rows["npu/trace_view.json"][how] == "torch_npu.profiler.profile(with_stack=True)"
    assert rows[f"rollout/{TORCH_NO_STACKS.name}"][how] == "torch.profiler.profile(with_stack=True)"
    assert rows[f"rollout/{TORCH_NO_STACKS.name}"][cols.index("ops")] == torch_ops

    out = tmp_path / "reports"
    result = CliRunner().invoke(cli, ["report", "--run", "run", "--out", str(out), "--db", str(config.db_path)])
    assert result.exit_code == 0, result.output
    page = (out / "run" / "index.html").read_text()
    assert "2 capture(s) hold no call stacks" in page
    assert "<code>npu/trace_view.json</code>" in page and f"<code>rollout/{TORCH_NO_STACKS.name}</code>" in page
    assert "torch_npu.profiler.profile(with_stack=True)" in page and "torch.profiler.profile(with_stack=True)" in page
    assert "<code>actor/" not in page  # the captures with stacks are not named


@pytest.mark.slow
def test_a_memory_page_of_a_capture_without_stacks_says_so(tmp_path, config):
    """A PyTorch trace with [memory] events and no stacks: its memory timeline says why no
    line of code is named, and how to record one."""
    trace = REAL / "kineto" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
    events = _events(trace)
    assert any(e.get("name") == "[memory]" for e in events) and not _raw(trace)[1]
    root = tmp_path / "run"
    (root / "critic").mkdir(parents=True)
    shutil.copy(trace, root / "critic" / trace.name)
    assert ingest(root, config, run="run").failed == 0
    out = tmp_path / "reports"
    result = CliRunner().invoke(cli, ["report", "--run", "run", "--out", str(out), "--db", str(config.db_path)])
    assert result.exit_code == 0, result.output
    pages = list((out / "run" / "memory_timeline").glob("*.html"))
    assert pages
    for page in pages:
        text = page.read_text()
        assert "This capture holds no call stacks" in text and "torch.profiler.profile(with_stack=True)" in text
