"""The figures of a run's role timeline, memory comparison and GMM heatmap pages.

Each is plain plotly JSON built from one query over the public views; data text that
Plotly shows as a label goes through `label` (Plotly reads labels as pseudo-HTML).
"""

from __future__ import annotations

from rlwh.report import queries as Q
from rlwh.report.context import (
    MAX_HEATMAPS,
    MAX_SPANS,
    Figure,
    Heatmap,
    ImbalanceRow,
    ReportSession,
    label,
    mib,
    ms,
    num,
    query_text,
    script_json,
    utc_text,
)

# ---------------------------------------------------------------- role timeline


def role_timeline_figure(s: ReportSession, run: str) -> Figure | None:
    params = {"run": run, "max_spans": MAX_SPANS}
    spans = s.rows(Q.ROLE_TIMELINE, params)
    if not spans:
        return None
    t0 = min(r["start_ns"] for r in spans)
    rows = sorted({(r["role"], r["rank_id"]) for r in spans}, key=lambda k: (k[0], k[1]))
    row_label = {k: label(f"{k[0]} · rank {k[1]}") for k in rows}
    traces = []
    for role in sorted({r["role"] for r in spans}):
        mine = [r for r in spans if r["role"] == role]
        traces.append({
            "type": "bar", "orientation": "h", "name": label(role),
            "y": [row_label[(r["role"], r["rank_id"])] for r in mine],
            "base": [ms(r["start_ns"], t0) for r in mine],
            "x": [round(r["dur_ns"] / 1e6, 6) for r in mine],
            "hovertext": [
                f"{label(r['role'])} · rank {r['rank_id']}<br>{label(r['source'])}: {label(r['name'])}"
                f"<br>capture {label(r['capture'])}<br>start {ms(r['start_ns'], t0):,.3f} ms, "
                f"{r['dur_ns'] / 1e6:,.3f} ms" for r in mine
            ],
            "hoverinfo": "text",
        })
    layout = {
        "barmode": "overlay", "height": 160 + 26 * len(rows), "margin": {"l": 220, "r": 20, "t": 30, "b": 50},
        "xaxis": {"title": {"text": f"ms since {utc_text(t0)} UTC"}, "zeroline": False},
        "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": [row_label[k] for k in rows],
                  "autorange": "reversed", "automargin": True},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"}, "showlegend": True,
    }
    total = spans[0]["total_spans"]
    note = f"{len(spans):,} spans on {len(rows)} (role, rank) rows."
    if total > len(spans):
        note = f"Data reduced: the {len(spans):,} longest of {total:,} spans are drawn."
    return Figure("role-timeline", "", note, script_json({"data": traces, "layout": layout}),
                  [query_text(Q.ROLE_TIMELINE, params)])


# ---------------------------------------------------------------- memory comparison


def compare_figures(skew: list[dict], run: str) -> list[Figure]:
    figures = []
    for i, role in enumerate(sorted({r["role"] for r in skew})):
        mine = [r for r in skew if r["role"] == role]
        xs = [f"rank {r['rank_id']}" for r in mine]
        peaks = [r for r in mine if r["peak_live_bytes"] is not None]
        spans = [r for r in mine if r["span_ns"] is not None]
        traces = [
            {"type": "bar", "name": "peak live MiB", "x": [f"rank {r['rank_id']}" for r in peaks],
             "y": [mib(r["peak_live_bytes"]) for r in peaks],
             "marker": {"color": ["#d62728" if r["is_memory_outlier"] else "#1f77b4" for r in peaks]},
             "hovertext": [f"rank {r['rank_id']}: {mib(r['peak_live_bytes']):,.1f} MiB, "
                           f"{num(r['peak_vs_median'], 2)} x median" + (" (outlier)" if r["is_memory_outlier"] else "")
                           for r in peaks], "hoverinfo": "text"},
            {"type": "bar", "name": "span ms", "x": [f"rank {r['rank_id']}" for r in spans],
             "y": [round(r["span_ns"] / 1e6, 3) for r in spans], "xaxis": "x2", "yaxis": "y2",
             "marker": {"color": ["#ff7f0e" if r["is_straggler"] else "#7f9fbf" for r in spans]},
             "hovertext": [f"rank {r['rank_id']}: {r['span_ns'] / 1e6:,.3f} ms, {num(r['span_vs_median'], 2)} x median"
                           + (" (straggler)" if r["is_straggler"] else "") for r in spans], "hoverinfo": "text"},
        ]
        shapes = []
        median_peak = next((r["median_peak_live_bytes"] for r in peaks), None)
        median_span = next((r["median_span_ns"] for r in spans), None)
        if median_peak is not None:
            shapes.append({"type": "line", "xref": "x domain", "yref": "y", "x0": 0, "x1": 1,
                           "y0": mib(median_peak), "y1": mib(median_peak), "line": {"dash": "dot", "color": "#333"}})
        if median_span is not None:
            shapes.append({"type": "line", "xref": "x2 domain", "yref": "y2", "x0": 0, "x1": 1,
                           "y0": median_span / 1e6, "y1": median_span / 1e6, "line": {"dash": "dot", "color": "#333"}})
        layout = {
            "height": 360, "showlegend": False, "margin": {"l": 70, "r": 20, "t": 40, "b": 50},
            "xaxis": {"domain": [0, 0.47], "type": "category", "categoryorder": "array", "categoryarray": xs},
            "xaxis2": {"domain": [0.53, 1], "type": "category", "categoryorder": "array", "categoryarray": xs},
            "yaxis": {"title": {"text": "peak live MiB"}}, "yaxis2": {"title": {"text": "span ms"}, "anchor": "x2"},
            "shapes": shapes,
        }
        outliers = [str(r["rank_id"]) for r in mine if r["is_memory_outlier"]]
        stragglers = [str(r["rank_id"]) for r in mine if r["is_straggler"]]
        note = (f"{len(mine)} ranks. Memory outliers: {', '.join(outliers) or 'none'}. "
                f"Stragglers: {', '.join(stragglers) or 'none'}. Dotted lines: the role's medians.")
        figures.append(Figure(f"compare-{i}", f"Role {role}", note,
                              script_json({"data": traces, "layout": layout}), [query_text(Q.RANK_SKEW, {"run": run})]))
    return figures


# ---------------------------------------------------------------- GMM heatmap


def gmm_heatmaps(s: ReportSession, run: str) -> tuple[list[Heatmap], str | None]:
    params = {"run": run}
    loads = s.rows(Q.GMM_LAYER_LOAD, params)
    if not loads:
        return [], None
    imbalance = s.rows(Q.GMM_IMBALANCE, params)
    keys = sorted({(r["step"], r["role"], r["rank_id"]) for r in loads}, key=lambda k: (k[0], k[1], k[2]))
    note = None
    if len(keys) > MAX_HEATMAPS:
        note = (f"Showing {MAX_HEATMAPS} of {len(keys)} (step, role, rank) heatmaps, in step order; "
                "query gmm_layer_load for the rest.")
        keys = keys[:MAX_HEATMAPS]
    by_key: dict[tuple, list[dict]] = {}
    for r in loads:
        by_key.setdefault((r["step"], r["role"], r["rank_id"]), []).append(r)
    heatmaps = []
    for i, key in enumerate(keys):
        rows = by_key[key]
        layers = sorted({r["layer"] for r in rows})
        experts = sorted({r["expert"] for r in rows})
        cell = {(r["layer"], r["expert"]): r["tokens"] for r in rows}
        z = [[cell.get((layer, e)) for e in experts] for layer in layers]
        trace = {"type": "heatmap", "x": experts, "y": layers, "z": z, "colorscale": "Viridis",
                 "colorbar": {"title": {"text": "tokens"}},
                 "hovertemplate": "layer %{y}, expert %{x}: %{z} tokens<extra></extra>"}
        layout = {"height": 120 + 22 * len(layers), "margin": {"l": 60, "r": 20, "t": 20, "b": 50},
                  "xaxis": {"title": {"text": "expert"}, "dtick": 1 if len(experts) <= 32 else None},
                  "yaxis": {"title": {"text": "layer"}, "autorange": "reversed"}}
        layout["xaxis"] = {k: v for k, v in layout["xaxis"].items() if v is not None}
        mine = [r for r in imbalance if (r["step"], r["role"], r["rank_id"]) == key]
        worst = max((r["max_mean_ratio"] for r in mine if r["max_mean_ratio"] is not None), default=None)
        table = [ImbalanceRow(r["layer"], r["experts"], r["total_tokens"], r["max_tokens"], num(r["max_mean_ratio"], 2),
                              num(r["cv"], 2), r["hottest_expert"],
                              worst is not None and r["max_mean_ratio"] == worst) for r in mine]
        figure = Figure(f"gmm-{i}", f"step {key[0]} · {key[1]} · rank {key[2]}",
                        f"{len(layers)} layers x {len(experts)} experts; worst max/mean {num(worst, 2)}.",
                        script_json({"data": [trace], "layout": layout}),
                        [query_text(Q.GMM_LAYER_LOAD, params), query_text(Q.GMM_IMBALANCE, params)])
        heatmaps.append(Heatmap(figure, table))
    return heatmaps, note


