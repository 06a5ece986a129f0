"""The GMM expert heatmaps of a run: tokens per (layer, expert), one heatmap per
(step, role, rank), from gmm_layer_load.

All heatmaps of one role share one colour scale (0 to the role's busiest cell), so a
rank that routes more tokens looks hotter than its peers, not the same.
"""

from __future__ import annotations

from rlwh.report import queries as Q
from rlwh.report.context import (
    MAX_HEATMAPS,
    Figure,
    Heatmap,
    ImbalanceRow,
    ReportSession,
    num,
    query_text,
    script_json,
)

INTEGER_TICKS = 40  # up to this many layers or experts get a tick each; more get Plotly's, still whole


def _axis(title: str, values: list[int], reversed_: bool = False) -> dict:
    axis: dict = {"title": {"text": title}, "tickformat": "d", "type": "linear"}
    if len(values) <= INTEGER_TICKS:
        axis.update(tickmode="array", tickvals=values)
    else:
        axis["dtick"] = max(1, round(len(values) / 20))
    if reversed_:
        axis["autorange"] = "reversed"
    return axis


def gmm_heatmaps(s: ReportSession, run: str) -> tuple[list[Heatmap], str | None]:
    """The heatmaps (in step, role, rank order, at most MAX_HEATMAPS) and a note when some were left out."""
    params = {"run": run}
    loads = s.rows(Q.GMM_LAYER_LOAD, params)
    if not loads:
        return [], None
    imbalance = s.rows(Q.GMM_IMBALANCE, params)
    keys = sorted({(r["step"], r["role"], r["rank_id"]) for r in loads},
                  key=lambda k: (k[0] is None, k[0], k[1] or "", k[2]))
    note = None
    if len(keys) > MAX_HEATMAPS:
        note = (f"Showing {MAX_HEATMAPS} of {len(keys)} (step, role, rank) heatmaps, in step order; "
                "query gmm_layer_load for the rest.")
        keys = keys[:MAX_HEATMAPS]
    by_key: dict[tuple, list[dict]] = {}
    for r in loads:
        by_key.setdefault((r["step"], r["role"], r["rank_id"]), []).append(r)
    role_max: dict[str | None, int] = {}
    for key in keys:
        role_max[key[1]] = max(role_max.get(key[1], 0), max(r["tokens"] for r in by_key[key]))
    heatmaps = []
    for i, key in enumerate(keys):
        rows = by_key[key]
        layers = sorted({r["layer"] for r in rows})
        experts = sorted({r["expert"] for r in rows})
        cell = {(r["layer"], r["expert"]): r["tokens"] for r in rows}
        z = [[cell.get((layer, e)) for e in experts] for layer in layers]
        trace = {"type": "heatmap", "x": experts, "y": layers, "z": z, "colorscale": "Viridis",
                 "zmin": 0, "zmax": max(role_max[key[1]], 1),
                 "colorbar": {"title": {"text": "tokens"}},
                 "hovertemplate": "layer %{y}, expert %{x}: %{z} tokens<extra></extra>"}
        layout = {"height": 140 + 22 * len(layers), "margin": {"l": 60, "r": 20, "t": 10, "b": 50},
                  "xaxis": _axis("expert", experts), "yaxis": _axis("layer", layers, reversed_=True)}
        mine = [r for r in imbalance if (r["step"], r["role"], r["rank_id"]) == key]
        worst = max((r["max_mean_ratio"] for r in mine if r["max_mean_ratio"] is not None), default=None)
        table = [ImbalanceRow(r["layer"], r["experts"], r["total_tokens"], r["max_tokens"], num(r["max_mean_ratio"], 2),
                              num(r["cv"], 2), r["hottest_expert"],
                              worst is not None and r["max_mean_ratio"] == worst) for r in mine]
        role = "(no role)" if key[1] is None else key[1]
        figure = Figure(f"gmm-{i}", f"step {key[0]} · {role} · rank {key[2]}",
                        f"{len(layers)} layers x {len(experts)} experts; worst max/mean {num(worst, 2)}; "
                        f"colour scale shared by every heatmap of role {role} (0 to "
                        f"{role_max[key[1]]:,} tokens).",
                        script_json({"data": [trace], "layout": layout}),
                        [query_text(Q.GMM_LAYER_LOAD, params), query_text(Q.GMM_IMBALANCE, params)])
        heatmaps.append(Heatmap(figure, table))
    return heatmaps, note
