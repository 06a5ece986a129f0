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


@pytest.mark.slow
def test_compare_page_draws_the_change_and_the_stacks_that_grew(tmp_path):
    """The change per (role, rank) as bars with the thresholds, the same figures as the
    terminal's CSV; the stacks whose live bytes at the peak grew, most first; a nav bar
    that links the run pages there are."""
    import json

    db = tmp_path / "w.duckdb"
    config = Config(db_path=db, workers=1)
    for run, allocs in (("job-a", 200), ("job-b", 800)):
        synth.write_ascend_profile(tmp_path / run, roles=("actor_update",), ranks=2, n_ops=400, n_allocs=allocs)
        ingest(tmp_path / run, config, run=run)
    out = tmp_path / "reports"
    runner = CliRunner()
    assert runner.invoke(cli, ["report", "--run", "job-a", "--out", str(out), "--db", str(db)]).exit_code == 0
    csv = runner.invoke(cli, ["compare", "job-a", "job-b", "--db", str(db), "--format", "csv"])
    header, *rows = [line.split(",") for line in csv.output.strip().splitlines()]
    table = {f"{r[0]} · rank {r[1]}": dict(zip(header, r)) for r in rows}
    result = runner.invoke(cli, ["compare", "job-a", "job-b", "--out", str(out), "--db", str(db)])
    html = (out / "compare-job-b-vs-job-a.html").read_text()
    figure = json.loads(re.search(r'<script type="application/json" id="compare-change-data">(.*?)</script>',
                                  html, re.S).group(1))
    bars = {t["name"]: dict(zip(t["x"], t["y"])) for t in figure["data"]}
    assert set(bars) == {"peak memory change %", "time in role change %"}
    for key, row in table.items():
        assert bars["peak memory change %"][key] == pytest.approx(float(row["peak_change_pct"]))
        assert bars["time in role change %"][key] == pytest.approx(float(row["time_change_pct"]))
    assert sorted(s["y0"] for s in figure["layout"]["shapes"]) == sorted([config.peak_memory_pct, config.role_span_pct])
    grew = re.findall(r'<td class="num">([\d,.]+)</td><td class="num">([\d,.]+)</td><td class="num">\+([\d,.]+)</td>',
                      html)
    assert grew, "no stack that grew is listed"
    growth = [float(g.replace(",", "")) for _, _, g in grew]
    assert growth == sorted(growth, reverse=True) and all(g > 0 for g in growth)
    for a, b, g in ([float(v.replace(",", "")) for v in row] for row in grew):
        assert b - a == pytest.approx(g, abs=0.11)
    nav = re.search(r'<nav class="crumbs">(.*?)</nav>', html, re.S).group(1)
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', nav)
    assert ("job-a/index.html", "Run job-a") in links and all((out / href).is_file() for href, _ in links)
    assert "page:" in result.output


@pytest.mark.slow
def test_run_names_are_escaped_once_in_the_change_note(tmp_path):
    """A run named like markup reads as its name under "Change per (role, rank)": escaped
    once by the page (it read &lt;b&gt; on screen when escaped twice)."""
    db = tmp_path / "w.duckdb"
    config = Config(db_path=db, workers=1)
    for run, ops in (("<b>", 400), ("x&y", 800)):
        synth.write_ascend_profile(tmp_path / f"run{ops}", roles=("actor_update",), ranks=1, n_ops=ops, n_allocs=100)
        ingest(tmp_path / f"run{ops}", config, run=run)
    out = tmp_path / "reports"
    CliRunner().invoke(cli, ["compare", "<b>", "x&y", "--out", str(out), "--db", str(db)])
    (page,) = out.glob("compare-*.html")
    note = re.search(r'<p class="note">Per \(role, rank\): how much (.*?) changed against (.*?)\. ',
                     page.read_text())
    assert note is not None and note.groups() == ("x&amp;y", "&lt;b&gt;")


def test_a_small_compare_writes_its_page_and_says_its_regressions(tmp_path):
    """The fast loop's compare: two runs of one small rank, the second doing twice the ops;
    the page is written where the command says and counts the regressions it printed."""
    db = tmp_path / "w.duckdb"
    config = Config(db_path=db, workers=1)
    for run, ops in (("job-a", 100), ("job-b", 200)):
        synth.write_ascend_profile(tmp_path / run, roles=("actor_update",), ranks=1, n_ops=ops, n_allocs=50,
                                   n_stacks=10)
        ingest(tmp_path / run, config, run=run)
    out = tmp_path / "reports"
    result = CliRunner().invoke(cli, ["compare", "job-a", "job-b", "--out", str(out), "--db", str(db)])
    assert result.exit_code == 3, result.output
    page = out / "compare-job-b-vs-job-a.html"
    assert f"page: {page}" in result.output
    regressions = int(re.search(r"(\d+) regression\(s\) of job-b against job-a", result.output).group(1))
    assert regressions > 0 and f"{regressions} regression(s) of job-b against job-a" in page.read_text()
