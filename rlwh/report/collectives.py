"""The collectives pages of a run, one per role: each rank's lateness and wait at every
collective instance (the collectives view), the rank the others waited for in each
step (the stragglers view), each rank's clock offset (clock_offsets), the instances that
moved their bytes slowest (collective_bandwidth), and each step's slowest links between
ranks (slowest_links, where the Ascend profiler wrote its communication matrix). Who
waits for whom, at a glance: a rank whose bars are tall in "late by" and near zero in
"waited" is the one holding the others back.
"""

from __future__ import annotations

from rlwh.report import queries as Q
from rlwh.report.context import Figure, ReportSession, label, query_text, script_json

MAX_INSTANCES = 400  # collective instances drawn per run: the first ones in time
MAX_LINKS = 10  # slowest links listed per step
MAX_RATES = 10  # slowest collective instances by bandwidth listed per role
RANK_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _instance(r: dict) -> tuple:
    """What names a collective instance (collectives' key columns)."""
    return (r["step"], r["group"], r["name"], r["seq"], r["seq_is_global"])


def _role_figure(index: int, role: str, rows: list[dict], params: dict) -> Figure:
    position: dict[tuple, int] = {}  # each instance, in the order of its first row
    for r in rows:
        position.setdefault(_instance(r), len(position))
    x = [label(f"{k + 1}. {name}" + (f" #{seq}" if seq > 1 else "") + (f" (step {step})" if step is not None else ""))
         for k, (step, _group, name, seq, _shared) in enumerate(position)]
    traces = []
    ranks = sorted({r["rank_id"] for r in rows})
    for n, rank in enumerate(ranks):
        mine = [r for r in rows if r["rank_id"] == rank]
        color = RANK_COLORS[n % len(RANK_COLORS)]
        xs = [x[position[_instance(r)]] for r in mine]
        hover = [f"rank {rank} at {label(r['name'])}<br>"
                 + ("never arrived" if r["arrive_ns"] is None else
                    f"late by {r['late_ns'] / 1e6:,.3f} ms, waited {r['wait_ns'] / 1e6:,.3f} ms"
                    + (" (last to arrive)" if r["is_last"] else "")
                    + (" (capped at its collective's duration: the arrivals asked for more)"
                       if r["wait_capped"] else "")
                    + (" (mismatched: the ranks ended too far apart to have run one operation; charged to no rank)"
                       if r["mismatched"] else ""))
                 for r in mine]
        for xaxis, axis, field in (("x", "y", "late_ns"), ("x2", "y2", "wait_ns")):
            traces.append({
                "type": "bar", "name": f"rank {rank}", "legendgroup": f"rank {rank}", "showlegend": axis == "y",
                "x": xs, "y": [None if r[field] is None else r[field] / 1e6 for r in mine], "xaxis": xaxis,
                "yaxis": axis,
                "marker": {"color": color}, "hovertext": hover, "hoverinfo": "text", "offsetgroup": str(rank),
            })
    layout = {
        "barmode": "group", "height": 520, "margin": {"l": 80, "r": 20, "t": 10, "b": 160},
        # Two charts, one category axis: the upper one's labels hidden, the lower one's below it.
        "xaxis": {"type": "category", "showticklabels": False, "anchor": "y"},
        "xaxis2": {"type": "category", "tickangle": -30, "automargin": True, "matches": "x", "anchor": "y2"},
        "yaxis": {"title": {"text": "late by (ms)"}, "domain": [0.55, 1.0]},
        "yaxis2": {"title": {"text": "waited (ms)"}, "domain": [0.0, 0.45], "anchor": "x2"},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
    }
    note = (f"{len(position):,} collective instances, {len(ranks)} ranks. Late by: the rank's arrival minus the "
            "first arrival; waited: the last arrival minus the rank's own (time it sat in the collective), "
            "never more than its collective lasted.")
    return Figure(f"collectives-{index}", label(role), note, script_json({"data": traces, "layout": layout}),
                  [query_text(Q.COLLECTIVE_ARRIVALS, params)])


def _fixed(value, scale: float, digits: int) -> str:
    return "" if value is None else f"{value / scale:,.{digits}f}"


def _rate_row(r: dict) -> dict:
    """A row of the slowest collective instances with its figures as text."""
    return {**r, "mb": _fixed(r["bytes"], 1e6, 3), "stay_ms": _fixed(r["longest_stay_ns"], 1e6, 3),
            "algbw": _fixed(r["slowest_algbw_gbps"], 1, 3), "transfer": _fixed(r["transfer_gbps"], 1, 3)}


def _link_row(r: dict) -> dict:
    """A slowest_links row with its figures as text; a peer outside the warehouse by its group rank."""
    return {**r, "peer": str(r["dst_rank_id"]) if r["dst_rank_id"] is not None else f"group rank {r['dst_rank']}",
            "size_mb": _fixed(r["size_bytes"], 1e6, 3), "duration_ms": _fixed(r["duration_ns"], 1e6, 3),
            "gbps": _fixed(r["bandwidth_gbps"], 1, 2), "median_gbps": _fixed(r["transport_median_gbps"], 1, 2),
            "of_median": _fixed(r["of_transport_median"], 1, 2)}


def collectives_pages(s: ReportSession, run: str) -> list[dict]:
    """Per role with collectives: {role, figure, stragglers (rows with ms text), clocks, capped,
    rates (the slowest instances by bandwidth), links (the slowest links of each step, figures
    as text), queries}."""
    params = {"run": run, "max_instances": MAX_INSTANCES}
    rows = s.rows(Q.COLLECTIVE_ARRIVALS, params)
    if not rows:
        return []
    stragglers = [{**r, "waited_for_ms": f"{r['waited_for_ns'] / 1e6:,.3f}",
                   "late_ms": "" if r["late_ns"] is None else f"{r['late_ns'] / 1e6:,.3f}"}
                  for r in s.rows(Q.STRAGGLERS, {"run": run})]
    clocks = [{**r, "offset_ms": f"{r['offset_ns'] / 1e6:,.3f}", "spread_ms": f"{r['end_spread_ns'] / 1e6:,.3f}",
               "applied_ms": f"{r['applied_offset_ns'] / 1e6:,.3f}"}
              for r in s.rows(Q.CLOCK_OFFSETS, {"run": run})]
    link_params = {"run": run, "max_links": MAX_LINKS}
    links = [_link_row(r) for r in s.rows(Q.SLOWEST_LINKS, link_params)]
    rate_params = {"run": run, "max_rows": MAX_RATES}
    rates = [_rate_row(r) for r in s.rows(Q.SLOWEST_COLLECTIVES, rate_params)]
    return [{"role": role,
             "figure": _role_figure(k, role, [r for r in rows if r["role"] == role], params),
             "stragglers": [r for r in stragglers if r["role"] == role],
             "clocks": [r for r in clocks if r["role"] == role],
             "capped": sum(1 for r in rows if r["role"] == role and r["wait_capped"]),
             "links": [r for r in links if r["role"] == role],
             "rates": [r for r in rates if r["role"] == role],
             "queries": [query_text(Q.STRAGGLERS, {"run": run}), query_text(Q.CLOCK_OFFSETS, {"run": run}),
                         query_text(Q.SLOWEST_COLLECTIVES, rate_params), query_text(Q.SLOWEST_LINKS, link_params)]}
            for k, role in enumerate(sorted({r["role"] for r in rows}))]
