"""The page of `rlwh compare RUN_A RUN_B --out DIR`, and of each regression nightly finds:
two runs per (role, rank) side by side, with links to both runs' memory timelines.

The figures are rlwh.report.compare_runs's (rank_skew, nightly's rule), so the page, the terminal
table and the nightly index always agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rlwh.report import render
from rlwh.report.compare_runs import SIDE_BY_SIDE, Comparison
from rlwh.report.context import Figure, Page, label, query_text, script_json
from rlwh.report.run import memory_page_name


def _help(text: str):
    return field(metadata={"help": text})


@dataclass
class CompareRow:
    role: str = _help("Role.")
    rank_id: int = _help("Global rank.")
    a_peak_mib: float | None = _help("Peak live MiB in run A.")
    b_peak_mib: float | None = _help("Peak live MiB in run B.")
    peak_change_pct: float | None = _help("Change of the peak from A to B, %.")
    a_time_ms: float | None = _help("Time in the role in run A, ms.")
    b_time_ms: float | None = _help("Time in the role in run B, ms.")
    time_change_pct: float | None = _help("Change of the time in role from A to B, %.")
    regression: str | None = _help("What regressed by nightly's rule, or None.")
    a_memory_href: str | None = _help("Run A's memory timeline page of this rank, when rendered.")
    b_memory_href: str | None = _help("Run B's memory timeline page of this rank, when rendered.")


@dataclass
class StackRow:
    role: str = _help("Role.")
    rank_id: int = _help("Global rank.")
    stack: str = _help("The call stack: its first user frame, else its top frame, else the op.")
    a_mib: float = _help("Its live MiB at the rank's peak in run A.")
    b_mib: float = _help("Its live MiB at the rank's peak in run B.")
    grew_mib: float = _help("How much it grew, MiB.")


@dataclass(kw_only=True)
class RunComparePage(Page):
    run_a: str = _help("The baseline run.")
    run_b: str = _help("The run compared with it.")
    rows: list[CompareRow] = _help("Per (role, rank) of either run: both runs' figures and the change.")
    regressions: list[str] = _help("The regressions by nightly's rule, one line each.")
    rule: str = _help("The regression rule and its thresholds, in words.")
    figures: list[Figure] = _help("The change per (role, rank) of peak memory and time in role, with the thresholds.")
    stacks: list[StackRow] = _help("The call stacks whose live bytes at the peak grew most, largest growth first.")


CHANGE_COLORS = {"peak_change_pct": "#1f77b4", "time_change_pct": "#ff7f0e"}
CHANGE_NAMES = {"peak_change_pct": "peak memory change %", "time_change_pct": "time in role change %"}


def _change_figure(comparison: Comparison, rows: list[CompareRow]) -> list[Figure]:
    """Grouped bars: each (role, rank)'s change in %, a dotted line at each threshold."""
    drawn = [r for r in rows if r.peak_change_pct is not None or r.time_change_pct is not None]
    if not drawn:
        return []
    x = [label(f"{r.role} · rank {r.rank_id}") for r in drawn]
    traces, shapes = [], []
    for metric, color in CHANGE_COLORS.items():
        values = [getattr(r, metric) for r in drawn]
        traces.append({"type": "bar", "name": CHANGE_NAMES[metric], "x": x, "y": values, "marker": {"color": color},
                       "hovertemplate": "%{x}<br>%{y:+.1f}%<extra>%{fullData.name}</extra>"})
        limit = comparison.thresholds.get(metric)
        if limit is not None:
            shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": limit, "y1": limit,
                           "line": {"dash": "dot", "color": color, "width": 1}})
    layout = {"barmode": "group", "height": 360, "margin": {"l": 70, "r": 20, "t": 10, "b": 120},
              "yaxis": {"title": {"text": f"change from {label(comparison.run_a)}, %"}, "zeroline": True},
              "xaxis": {"type": "category"}, "shapes": shapes, "legend": {"orientation": "h", "y": 1.02,
                                                                          "yanchor": "bottom"}}
    note = (f"Per (role, rank): how much {comparison.run_b} changed against {comparison.run_a}. "
            "Dotted lines: the regression thresholds (a bar above its line is a regression).")
    sql = query_text(SIDE_BY_SIDE, {"a": comparison.run_a, "b": comparison.run_b})
    return [Figure("compare-change", "Change per (role, rank)", note, script_json({"data": traces, "layout": layout}),
                   [sql])]


def compare_page_name(run_a: str, run_b: str) -> str:
    """File name of the page comparing run_b with run_a."""
    return f"compare-{render.slug(run_b)}-vs-{render.slug(run_a)}.html"


def write_compare_page(comparison: Comparison, out: Path, reports: Path, rule: str,
                       index: Path | None = None) -> Path:
    """Write the comparison into `out` (a folder); `reports` is where run pages live
    (`<reports>/<run slug>/memory_timeline/...`), linked where they exist."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / compare_page_name(comparison.run_a, comparison.run_b)
    columns = comparison.table.columns
    rows = []
    for values in comparison.table.rows:
        r = dict(zip(columns, values))
        links = {}
        for side, run in (("a", comparison.run_a), ("b", comparison.run_b)):
            page = reports / render.slug(run) / memory_page_name(r["role"], r["rank_id"])
            links[side] = os.path.relpath(page, out) if page.exists() else None
        rows.append(CompareRow(
            role=r["role"], rank_id=r["rank_id"], a_peak_mib=r["a_peak_mib"], b_peak_mib=r["b_peak_mib"],
            peak_change_pct=r["peak_change_pct"], a_time_ms=r["a_time_in_role_ms"],
            b_time_ms=r["b_time_in_role_ms"], time_change_pct=r["time_change_pct"], regression=r["regression"],
            a_memory_href=links["a"], b_memory_href=links["b"]))
    nav = [("All runs", index)] if index is not None else []
    if index is None and (out / "index.html").exists():  # `rlwh compare --out` into a report folder
        nav.append(("All runs", out / "index.html"))
    for run in (comparison.run_a, comparison.run_b):
        summary = reports / render.slug(run) / "index.html"
        if summary.exists():
            nav.append((f"Run {run}", summary))
    stacks = [StackRow(r["role"], r["rank_id"], r["stack"], round(r["a_live_bytes"] / 1048576, 1),
                       round(r["b_live_bytes"] / 1048576, 1), round(r["grew_bytes"] / 1048576, 1))
              for r in comparison.stacks]
    figures = _change_figure(comparison, rows)
    compare_page = RunComparePage(
        **render.page_base(f"{comparison.run_b} against {comparison.run_a}", out, reports, nav, bool(figures)),
        run_a=comparison.run_a, run_b=comparison.run_b, rows=rows,
        regressions=[str(g) for g in comparison.regressions], rule=rule, figures=figures, stacks=stacks)
    return render.write_text(out, path, render.render_page("run_compare.html", compare_page))
