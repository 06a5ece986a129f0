"""`rlwh compare A B --out DIR`: the comparison as a page, agreeing with the terminal table."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from rlwh import synth
from rlwh.cli import cli
from rlwh.config import Config
from rlwh.ingest.runner import ingest


@pytest.mark.slow
def test_compare_page_shows_both_runs_and_links_their_memory_pages(tmp_path):
    db = tmp_path / "w.duckdb"
    config = Config(db_path=db, workers=1)
    # Run b runs twice the ops of run a on every rank: its time in the role regresses.
    for run, ops in (("job-a", 400), ("job-b", 800)):
        synth.write_ascend_profile(tmp_path / run, roles=("actor_update",), ranks=2, n_ops=ops, n_allocs=300)
        ingest(tmp_path / run, config, run=run)
    out = tmp_path / "reports"
    runner = CliRunner()
    assert runner.invoke(cli, ["report", "--run", "job-a", "--out", str(out), "--db", str(db)]).exit_code == 0
    result = runner.invoke(cli, ["compare", "job-a", "job-b", "--out", str(out), "--db", str(db)])
    assert result.exit_code == 3, result.output  # a regression: nightly's status
    page = out / "compare-job-b-vs-job-a.html"
    assert f"page: {page}" in result.output
    html = page.read_text()
    regressions = int(re.search(r"(\d+) regression\(s\) of job-b against job-a", result.output).group(1))
    assert regressions > 0 and f"{regressions} regression(s) of job-b against job-a" in html
    rows = re.findall(r'<tr class="(failed|)">\s*<td class="text">actor_update</td><td class="num">(\d)</td>', html)
    assert sorted(rank for _, rank in rows) == ["0", "1"]
    assert [flag for flag, _ in rows] == ["failed", "failed"]
    # Run a's pages were rendered, run b's not: only a's memory timelines are linked, and they exist.
    links = re.findall(r'href="([^"]+memory_timeline[^"]+)"', html)
    assert links and all((out / link).is_file() and "job-a" in link for link in links)
