"""The "memory across ranks" figures: per role, each rank's peak live memory and span
against the role's median (rank_skew), outliers and stragglers marked.

A role draws only the charts it has data for: a role with spans but no memory rows gets
its span chart alone, full width, never an empty peak chart beside it.
"""

from __future__ import annotations

from rlwh.report import queries as Q
from rlwh.report.context import Figure, mib, num, query_text, script_json

OUTLIER_COLOR, PEAK_COLOR = "#d62728", "#1f77b4"
STRAGGLER_COLOR, SPAN_COLOR = "#ff7f0e", "#7f9fbf"


def _peak_chart(peaks: list[dict], axis: str) -> tuple[dict, float | None]:
    trace = {
        "type": "bar", "name": "peak live MiB", "x": [f"rank {r['rank_id']}" for r in peaks],
        "y": [mib(r["peak_live_bytes"]) for r in peaks], "xaxis": "x" + axis[1:], "yaxis": axis,
        "marker": {"color": [OUTLIER_COLOR if r["is_memory_outlier"] else PEAK_COLOR for r in peaks]},
        "hovertext": [f"rank {r['rank_id']}: {mib(r['peak_live_bytes']):,.1f} MiB, {num(r['peak_vs_median'], 2)} x "
                      "median" + (" (outlier)" if r["is_memory_outlier"] else "") for r in peaks],
        "hoverinfo": "text",
    }
    median = next((r["median_peak_live_bytes"] for r in peaks if r["median_peak_live_bytes"] is not None), None)
    return trace, None if median is None else mib(median)


def _span_chart(spans: list[dict], axis: str) -> tuple[dict, float | None]:
    trace = {
        "type": "bar", "name": "span ms", "x": [f"rank {r['rank_id']}" for r in spans],
        "y": [round(r["span_ns"] / 1e6, 3) for r in spans], "xaxis": "x" + axis[1:], "yaxis": axis,
        "marker": {"color": [STRAGGLER_COLOR if r["is_straggler"] else SPAN_COLOR for r in spans]},
        "hovertext": [f"rank {r['rank_id']}: {r['span_ns'] / 1e6:,.3f} ms, {num(r['span_vs_median'], 2)} x median"
                      + (" (straggler)" if r["is_straggler"] else "") for r in spans],
        "hoverinfo": "text",
    }
    median = next((r["median_span_ns"] for r in spans if r["median_span_ns"] is not None), None)
    return trace, None if median is None else median / 1e6


def _role_figure(role: str, mine: list[dict]) -> tuple[dict, str] | None:
    peaks = [r for r in mine if r["peak_live_bytes"] is not None]
    spans = [r for r in mine if r["span_ns"] is not None]
    charts = [(title, rows, build) for title, rows, build in
              (("peak live MiB", peaks, _peak_chart), ("span ms", spans, _span_chart)) if rows]
    if not charts:
        return None
    xs = [f"rank {r['rank_id']}" for r in mine]
    width = 1 / len(charts)
    layout: dict = {"height": 340, "showlegend": False, "margin": {"l": 70, "r": 20, "t": 20, "b": 50}, "shapes": []}
    traces = []
    for k, (title, rows, build) in enumerate(charts):
        axis = "y" if k == 0 else f"y{k + 1}"
        suffix = "" if k == 0 else str(k + 1)
        trace, median = build(rows, axis)
        traces.append(trace)
        domain = [k * width + (0.03 if k else 0), (k + 1) * width - (0.03 if k + 1 < len(charts) else 0)]
        layout["xaxis" + suffix] = {"domain": domain, "type": "category", "categoryorder": "array",
                                    "categoryarray": [x for x in xs if x in trace["x"]], "anchor": axis}
        layout["yaxis" + suffix] = {"title": {"text": title}, "anchor": "x" + suffix, "rangemode": "tozero"}
        if median is not None:
            layout["shapes"].append({"type": "line", "xref": f"x{suffix} domain", "yref": axis, "x0": 0, "x1": 1,
                                     "y0": median, "y1": median, "line": {"dash": "dot", "color": "#333"}})
    missing = [] if peaks else ["no memory rows: no peak chart"]
    if not spans:
        missing.append("no spans: no span chart")
    return {"data": traces, "layout": layout}, "; ".join(missing)


def _ranks_named(what: str, ranks: list[str]) -> str:
    """'Memory outlier: rank 0.', 'Stragglers: ranks 1, 3.', 'No straggler.': rank ids read as
    ranks, never as counts."""
    if not ranks:
        return f"No {what.lower()}."
    if len(ranks) == 1:
        return f"{what}: rank {ranks[0]}."
    return f"{what}s: ranks {', '.join(ranks)}."


def compare_figures(skew: list[dict], run: str) -> list[Figure]:
    """One figure per role that has peaks or spans."""
    figures = []
    for i, role in enumerate(sorted({r["role"] for r in skew})):
        mine = [r for r in skew if r["role"] == role]
        built = _role_figure(role, mine)
        if built is None:
            continue
        figure, missing = built
        outliers = [str(r["rank_id"]) for r in mine if r["is_memory_outlier"]]
        stragglers = [str(r["rank_id"]) for r in mine if r["is_straggler"]]
        note = (f"{len(mine)} ranks. {_ranks_named('Memory outlier', outliers)} "
                f"{_ranks_named('Straggler', stragglers)} Dotted lines: the role's medians."
                + (f" This role has {missing}." if missing else ""))
        figures.append(Figure(f"compare-{i}", f"Role {role}", note, script_json(figure),
                              [query_text(Q.RANK_SKEW, {"run": run})]))
    return figures
