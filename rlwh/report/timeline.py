"""The role timeline of a run (RL-Insight's Gantt of role spans): one chart per role and
clock, each rank's device lanes (compute, communication, idle) under its spans.

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


# Darker and lighter than any role colour, so a lane never reads as a role.
LANE_COLORS = {"compute": "#1b5e20", "communication": "#b35806", "idle": "#dcdcdc"}
LANES = ("compute", "communication", "idle")


# A gap between a role's bursts of activity longer than this many times the role's busy
# time (and than MIN_COLLAPSED_NS) is drawn as a narrow break: a role captured twice,
# months apart, keeps bars that are pixels wide, not slivers on a months-long axis.
COLLAPSE_FACTOR = 2
MIN_COLLAPSED_NS = 1_000_000_000
BREAK_SHARE = 0.04  # width of a collapsed gap, as a share of the drawn activity
BINS = 400  # time bins of a role's device lanes where they hold more bars than MAX_SPANS


class _Axis:
    """Where a time lands on the x axis: a date (epoch), seconds on a session clock, or, where
    long gaps are collapsed, ms of drawn time (each burst keeps its length, gaps shrink)."""

    def __init__(self, epoch: bool, intervals: list[tuple[int, int]]):
        self.epoch, self.t0 = epoch, min(s for s, _ in intervals)
        bursts: list[list[int]] = []
        for start, end in sorted(intervals):
            if bursts and start <= bursts[-1][1]:
                bursts[-1][1] = max(bursts[-1][1], end)
            else:
                bursts.append([start, end])
        busy = sum(e - s for s, e in bursts)
        limit = max(MIN_COLLAPSED_NS, COLLAPSE_FACTOR * busy)
        clusters = [list(bursts[0])]
        for start, end in bursts[1:]:
            if start - clusters[-1][1] > limit:
                clusters.append([start, end])
            else:
                clusters[-1][1] = max(clusters[-1][1], end)
        self.collapsed = epoch and len(clusters) > 1
        drawn = sum(e - s for s, e in clusters)
        gap = max(1, int(drawn * BREAK_SHARE))
        self.clusters: list[tuple[int, int, int]] = []  # (start, end, offset ns on the drawn axis)
        offset = 0
        for start, end in clusters:
            self.clusters.append((start, end, offset))
            offset += end - start + gap
        self.gap = gap

    def at(self, ns: int):
        if not self.collapsed:
            return _date(ns) if self.epoch else (ns - self.t0) / 1e9
        start, _end, offset = next(c for c in reversed(self.clusters) if c[0] <= ns)
        return (offset + ns - start) / 1e6

    def length(self, dur_ns: int) -> float:
        return dur_ns / 1e6 if self.epoch else dur_ns / 1e9

    def layout(self, role: str, clock: str) -> tuple[dict, list[dict], list[dict]]:
        """The x axis, and the shapes and annotations that mark collapsed gaps."""
        if not self.collapsed:
            if self.epoch:
                return {"title": {"text": f"UTC (epoch clock), {label(role)}'s own time range"}, "type": "date",
                        "zeroline": False}, [], []
            return {"title": {"text": f"s since {self.t0 / 1e9:,.6f} s on the {label(clock)} clock (the export "
                                      "does not say how that clock maps to UTC)"}, "type": "linear",
                    "ticksuffix": " s", "zeroline": False}, [], []
        ticks, texts, shapes, notes = [], [], [], []
        for k, (start, _end, offset) in enumerate(self.clusters):
            ticks += [offset / 1e6]
            texts += [utc_text(start)[:23]]
            if k:
                x = (offset - self.gap / 2) / 1e6
                prev_end = self.clusters[k - 1][1]
                shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
                               "line": {"dash": "dot", "color": "#888", "width": 1}})
                notes.append({"xref": "x", "yref": "paper", "x": x, "y": 1.0, "yanchor": "bottom", "showarrow": False,
                              "text": f"gap of {_span_text(start - prev_end)}", "font": {"size": 10}})
        axis = {"title": {"text": f"UTC (epoch clock), {label(role)}'s own time range; gaps longer than "
                                  f"{COLLAPSE_FACTOR}x its activity drawn as dotted breaks"},
                "type": "linear", "tickvals": ticks, "ticktext": texts, "zeroline": False, "showgrid": False}
        return axis, shapes, notes


def _span_text(ns: int) -> str:
    seconds = ns / 1e9
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.3f} s"


def _bars(rows: list[dict], axis: _Axis, y, name: str, color: str, hover) -> list[dict]:
    """A bar trace (and a tick at each bar's start, so a bar under a pixel still shows)."""
    base = [axis.at(r["start_ns"]) for r in rows]  # a date axis: bars start at a date, ms long
    length = [axis.length(r["dur_ns"]) for r in rows]
    ys = [y(r) for r in rows]
    texts = [hover(r) for r in rows]
    return [
        {"type": "bar", "orientation": "h", "name": name, "y": ys, "base": base, "x": length, "hovertext": texts,
         "hoverinfo": "text", "legendgroup": name, "marker": {"color": color}},
        {"type": "scatter", "mode": "markers", "name": name, "legendgroup": name, "showlegend": False, "y": ys,
         "x": base, "hovertext": texts, "hoverinfo": "text",
         "marker": {"symbol": "line-ns-open", "size": 16, "color": color, "line": {"width": 2, "color": color}}},
    ]


def _binned_bars(rows: list[dict], axis: _Axis, lane: str) -> list[dict]:
    """A lane too dense to draw bar by bar: one bar per time bin, as long as the device was
    busy in it (so a rank's bars add up to its busy time), hover saying the fraction."""
    return [{"type": "bar", "orientation": "h", "name": f"device {lane} (busy per bin)", "legendgroup": lane,
             "y": [label(f"rank {r['rank_id']} · {lane}") for r in rows],
             "base": [axis.at(r["start_ns"]) for r in rows], "x": [axis.length(r["busy_ns"]) for r in rows],
             "customdata": [r["busy_ns"] for r in rows],
             "hovertext": [f"rank {r['rank_id']} · device {lane}<br>{r['busy_ns'] / r['width_ns']:.0%} of the "
                           f"{r['width_ns'] / 1e6:,.3f} ms from {utc_text(r['start_ns'])} UTC"
                           f"<br>{r['busy_ns'] / 1e6:,.3f} ms" for r in rows],
             "hoverinfo": "text", "marker": {"color": LANE_COLORS[lane]}}]


def _role_figure(index: int, clock: str, role: str, color: str, spans: list[dict], lanes: list[dict],
                 params: dict, reduced: str, binned: bool = False) -> Figure:
    """One role on its own time axis: its spans per rank, each rank's device lanes under them."""
    epoch = clock == "epoch"
    axis = _Axis(epoch, [(r["start_ns"], r["start_ns"] + r["dur_ns"]) for r in spans]
                 + [(r["start_ns"], r["start_ns"] + (r["width_ns"] if binned else r["dur_ns"])) for r in lanes])
    ranks = sorted({r["rank_id"] for r in spans + lanes})
    present = {(x["rank_id"], x["lane"]) for x in lanes}
    lane_names = {k: [lane for lane in LANES if (k, lane) in present] for k in ranks}
    span_row = {k: label(f"{role} · rank {k}") for k in ranks}
    rows = [row for k in ranks for row in [span_row[k]] + [label(f"rank {k} · {lane}") for lane in lane_names[k]]]

    def when(ns: int) -> str:
        return f"{utc_text(ns)} UTC" if epoch else f"{ns / 1e9:,.6f} s on the {label(clock)} clock"

    traces = _bars(spans, axis, lambda r: span_row[r["rank_id"]], label(role), color,
                   lambda r: (f"{label(r['role'])} · rank {r['rank_id']}<br>{label(r['source'])}: {label(r['name'])}"
                              f"<br>capture {label(r['capture'])}<br>start {when(r['start_ns'])}"
                              f"<br>{r['dur_ns'] / 1e6:,.3f} ms"))
    for lane in LANES:
        mine = [r for r in lanes if r["lane"] == lane]
        if mine and binned:
            traces += _binned_bars(mine, axis, lane)
        elif mine:
            traces += _bars(mine, axis, lambda r: label(f"rank {r['rank_id']} · {r['lane']}"),
                            f"device {lane}", LANE_COLORS[lane],
                            lambda r: (f"rank {r['rank_id']} · device {r['lane']}"
                                       + (f" ({r['ops']:,} ops, overlapping ones once)" if r["ops"] else "")
                                       + f"<br>start {when(r['start_ns'])}<br>{r['dur_ns'] / 1e6:,.3f} ms"))
    xaxis, shapes, annotations = axis.layout(role, clock)
    layout = {
        "barmode": "overlay", "height": 170 + 26 * len(rows), "margin": {"l": 220, "r": 20, "t": 10, "b": 70},
        "xaxis": xaxis,
        "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": rows,
                  "autorange": "reversed", "automargin": True},
        "legend": {"orientation": "h", "y": 1.06 if annotations else 1.0, "yanchor": "bottom"}, "showlegend": True,
        "shapes": shapes, "annotations": annotations,
    }
    note = f"{len(spans):,} spans on {len(ranks)} ranks"
    if binned:
        note += (f", each rank's device lanes in {BINS} time bins: a bar is as long as the device was busy in its "
                 "bin (compute, communication: the union of kernels, as device_time counts them; idle: no device "
                 "work), so a rank's bars add up to its device time.")
    else:
        note += f", {len(lanes):,} device bars (compute and communication: union of kernels; idle: gaps)." if lanes \
            else "."
    if reduced:
        note += " " + reduced
    clock_title = "epoch clock (UTC)" if epoch else f"clock {clock}: its own axis, not comparable with UTC"
    lane_query = query_text(Q.DEVICE_BINS, {**params, "bins": BINS}) if binned else query_text(Q.DEVICE_LANES, params)
    queries = [query_text(Q.ROLE_TIMELINE, params)] + ([lane_query] if lanes else [])
    return Figure(f"role-timeline-{index}", f"{label(role)} · {clock_title}", note,
                  script_json({"data": traces, "layout": layout}), queries)


def role_timeline_figures(s: ReportSession, run: str) -> list[Figure]:
    """One Gantt per (clock, role), epoch first, each role on its own time axis (roles run
    minutes apart and their spans last milliseconds: on one shared axis they would be
    slivers); [] when the run has none."""
    params = {"run": run, "max_spans": MAX_SPANS}
    spans = s.rows(Q.ROLE_TIMELINE, params)
    lanes = s.rows(Q.DEVICE_LANES, params) if spans else []
    # More device bars than the page draws: a subset (the longest, mostly idle gaps) would
    # show a busy device as idle, so every lane is drawn as busy time per bin instead.
    binned = bool(lanes) and lanes[0]["total_bars"] > len(lanes)
    if binned:
        lanes = s.rows(Q.DEVICE_BINS, {"run": run, "bins": BINS})
    clocks = sorted({r["clock"] for r in spans}, key=lambda c: (c != "epoch", c))
    roles = sorted({r["role"] for r in spans})
    colors = {role: ROLE_COLORS[k % len(ROLE_COLORS)] for k, role in enumerate(roles)}
    figures: list[Figure] = []
    for clock in clocks:
        drawn = [r for r in spans if r["clock"] == clock]
        reduced = [f"Data reduced: the {len(drawn):,} longest of {drawn[0]['total_spans']:,} spans of this clock "
                   "are drawn."] if drawn[0]["total_spans"] > len(drawn) else []
        if binned and clock == "epoch":
            reduced.append("The device bars are too many to draw one by one: each lane shows its busy time per bin.")
        for role in sorted({r["role"] for r in drawn}):
            mine = [r for r in drawn if r["role"] == role]
            device = [r for r in lanes if r["role"] == role] if clock == "epoch" else []
            figures.append(_role_figure(len(figures), clock, role, colors[role], mine, device, params,
                                        " ".join(reduced), binned))
    return figures
