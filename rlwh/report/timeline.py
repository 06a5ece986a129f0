"""The role timeline of a run (RL-Insight's Gantt of role spans): one chart per clock.

role_timeline's `clock` says what its times count: 'epoch' (drawn on a date axis, UTC)
or an NVTX export's 'nsys_session' clock, whose zero the export does not tie to the
epoch (drawn in seconds on that clock). Two clocks never share an axis: on one axis a
session-clock span from 1970 and an epoch span from today leave both invisible.
"""

from __future__ import annotations

from datetime import datetime, timezone

from rlwh.report import queries as Q
from rlwh.report.context import MAX_SPANS, Figure, ReportSession, label, query_text, script_json, utc_text

ROLE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
               "#d62728")


def _date(ns: int) -> str:
    """An epoch time as Plotly's date text, to the microsecond (Plotly keeps no finer)."""
    moment = datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{(ns % 1_000_000_000) // 1000:06d}"


def _clock_figure(index: int, clock: str, spans: list[dict], params: dict) -> Figure:
    epoch = clock == "epoch"
    t0 = min(r["start_ns"] for r in spans)
    rows = sorted({(r["role"], r["rank_id"]) for r in spans}, key=lambda k: (k[0], k[1]))
    row_label = {k: label(f"{k[0]} · rank {k[1]}") for k in rows}
    traces: list[dict] = []
    for k, role in enumerate(sorted({r["role"] for r in spans})):
        mine = [r for r in spans if r["role"] == role]
        color = ROLE_COLORS[k % len(ROLE_COLORS)]
        if epoch:  # a date axis: bars start at a date and are as long as their duration in ms
            base = [_date(r["start_ns"]) for r in mine]
            length = [r["dur_ns"] / 1e6 for r in mine]
            when = [f"{utc_text(r['start_ns'])} UTC" for r in mine]
        else:
            base = [(r["start_ns"] - t0) / 1e9 for r in mine]
            length = [r["dur_ns"] / 1e9 for r in mine]
            when = [f"{r['start_ns'] / 1e9:,.6f} s on the {label(clock)} clock" for r in mine]
        traces.append({
            "type": "bar", "orientation": "h", "name": label(role),
            "y": [row_label[(r["role"], r["rank_id"])] for r in mine], "base": base, "x": length,
            "hovertext": [f"{label(r['role'])} · rank {r['rank_id']}<br>{label(r['source'])}: {label(r['name'])}"
                          f"<br>capture {label(r['capture'])}<br>start {w}<br>{r['dur_ns'] / 1e6:,.3f} ms"
                          for r, w in zip(mine, when)],
            "hoverinfo": "text", "legendgroup": label(role), "marker": {"color": color},
        })
        # A tick at each span's start: a span shorter than a pixel still shows.
        traces.append({
            "type": "scatter", "mode": "markers", "name": label(role), "legendgroup": label(role),
            "showlegend": False, "y": traces[-1]["y"], "x": base, "hovertext": traces[-1]["hovertext"],
            "hoverinfo": "text",
            "marker": {"symbol": "line-ns-open", "size": 16, "color": color, "line": {"width": 2, "color": color}},
        })
    if epoch:
        xaxis: dict = {"title": {"text": "UTC (epoch clock)"}, "type": "date"}
    else:
        xaxis = {"title": {"text": f"s since {t0 / 1e9:,.6f} s on the {label(clock)} clock (the export does not say "
                                   "how that clock maps to UTC)"}, "type": "linear", "ticksuffix": " s"}
    xaxis["zeroline"] = False
    layout = {
        "barmode": "overlay", "height": 170 + 26 * len(rows), "margin": {"l": 220, "r": 20, "t": 10, "b": 70},
        "xaxis": xaxis,
        "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": [row_label[k] for k in rows],
                  "autorange": "reversed", "automargin": True},
        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom"}, "showlegend": True,
    }
    total = spans[0]["total_spans"]
    note = f"{len(spans):,} spans on {len(rows)} (role, rank) rows."
    if total > len(spans):
        note = f"Data reduced: the {len(spans):,} longest of {total:,} spans are drawn."
    title = "Epoch clock (UTC)" if epoch else f"Clock {clock}: its own axis, not comparable with UTC"
    return Figure(f"role-timeline-{index}", title, note, script_json({"data": traces, "layout": layout}),
                  [query_text(Q.ROLE_TIMELINE, params)])


def role_timeline_figures(s: ReportSession, run: str) -> list[Figure]:
    """One Gantt per clock of the run's spans, epoch first; [] when the run has none."""
    params = {"run": run, "max_spans": MAX_SPANS}
    spans = s.rows(Q.ROLE_TIMELINE, params)
    clocks = sorted({r["clock"] for r in spans}, key=lambda c: (c != "epoch", c))
    return [_clock_figure(i, clock, [r for r in spans if r["clock"] == clock], params)
            for i, clock in enumerate(clocks)]
