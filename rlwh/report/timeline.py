"""The role timeline of a run (RL-Insight's Gantt of role spans): one chart per role and
clock, each rank's phase ranges (phase_device_time: NVTX, MSTX, user annotations) and
device lanes (compute, communication, idle) under its spans.

Where clock_offsets aligned a role's clocks, every epoch time of a rank is drawn on the
role's reference clock (less clock_offsets.applied_offset_ns), as collectives reports its
arrivals; each chart's note says which.

role_timeline's `clock` says what its times count: 'epoch' (drawn on a date axis, UTC)
or an NVTX export's 'nsys_session' clock, whose zero the export does not tie to the
epoch (drawn in seconds on that clock). Two clocks never share an axis: on one axis a
session-clock span from 1970 and an epoch span from today leave both invisible.
"""

from __future__ import annotations

from datetime import datetime, timezone

from rlwh.report import queries as Q
from rlwh.report.context import (
    MAX_PHASES,
    MAX_SPANS,
    Figure,
    ReportSession,
    label,
    query_text,
    script_json,
    utc_text,
)

ROLE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
               "#d62728")


def _date(ns: int) -> str:
    """An epoch time as Plotly's date text, to the microsecond (Plotly keeps no finer)."""
    moment = datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{(ns % 1_000_000_000) // 1000:06d}"


# Darker and lighter than any role colour, so a lane never reads as a role.
LANE_COLORS = {"compute": "#1b5e20", "communication": "#b35806", "idle": "#dcdcdc"}
LANES = ("compute", "communication", "idle")
# Phase ranges: light colours, so a phase reads as neither a role nor a device lane, and
# its name is legible on it. A range nested in another is drawn thinner, on top of it.
PHASE_COLORS = ("#a6cee3", "#fdbf6f", "#b2df8a", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7", "#bebada", "#fccde5",
                "#d9d9d9")
PHASE_WIDTH, PHASE_NESTED, PHASE_MIN_WIDTH = 0.8, 0.7, 0.2


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


def _phase_ranges(rows: list[dict]) -> list[dict]:
    """phase_device_time's rows (one per device) grouped into ranges, each with its nesting
    depth on its rank (how many of the rank's ranges enclose it)."""
    ranges: dict[tuple, dict] = {}
    for r in rows:
        key = (r["rank_id"], r["capture"], r["phase"], r["source"], r["domain"], r["start_ns"], r["end_ns"])
        ranges.setdefault(key, {**r, "devices": []})["devices"].append(r)
    out = sorted(ranges.values(), key=lambda r: (r["rank_id"], r["start_ns"], -r["end_ns"]))
    open_ends: list[int] = []
    for k, r in enumerate(out):
        if k and out[k - 1]["rank_id"] != r["rank_id"]:
            open_ends = []
        while open_ends and open_ends[-1] <= r["start_ns"]:
            open_ends.pop()
        r["depth"] = len(open_ends)
        open_ends.append(r["end_ns"])
    return sorted(out, key=lambda r: (r["depth"], r["rank_id"], r["start_ns"]))  # outer ones drawn first


def _phase_hover(r: dict, when, reference: int | None) -> str:
    origin = label(r["source"]) + ("" if r["domain"] == "default" else f" (domain {label(r['domain'])})")
    lines = [f"rank {r['rank_id']} · phase {label(r['phase'])}", f"{origin}, capture {label(r['capture'])}",
             f"CPU range from {when(r['start_ns'])}, {r['dur_ns'] / 1e6:,.3f} ms"
             + _shift_text(r["rank_id"], r["shift_ns"], reference)]
    for d in r["devices"]:
        lines.append(f"{label(d['device'])}: {d['activities']:,} activities launched in it, device window "
                     f"{d['window_ns'] / 1e6:,.3f} ms")
        lines.append(f"compute {d['compute_ns'] / 1e6:,.3f} · communication {d['communication_ns'] / 1e6:,.3f} "
                     f"({d['exposed_communication_ns'] / 1e6:,.3f} exposed) · memcpy {d['memcpy_ns'] / 1e6:,.3f} "
                     f"· idle {d['idle_ns'] / 1e6:,.3f} ms")
    return "<br>".join(lines)


def _phase_bars(ranges: list[dict], axis: "_Axis", when, reference: int | None) -> list[dict]:
    """One bar per phase range on its rank's phase lane, coloured by phase, named where it fits."""
    names = list(dict.fromkeys(r["phase"] for r in sorted(ranges, key=lambda r: r["start_ns"])))
    color = {name: PHASE_COLORS[k % len(PHASE_COLORS)] for k, name in enumerate(names)}
    return [{
        "type": "bar", "orientation": "h", "name": "phase ranges (CPU side)", "legendgroup": "phases",
        "y": [label(f"rank {r['rank_id']} · phases") for r in ranges],
        "base": [axis.at(r["start_ns"]) for r in ranges], "x": [axis.length(r["dur_ns"]) for r in ranges],
        "width": [max(PHASE_MIN_WIDTH, PHASE_WIDTH * PHASE_NESTED ** r["depth"]) for r in ranges],
        "text": [label(r["phase"]) for r in ranges], "textposition": "inside", "insidetextanchor": "start",
        "textfont": {"size": 10, "color": "#1d2330"},
        # the recorded CPU range (before any clock shift): what phase_device_time's start_ns, end_ns hold
        "customdata": [[r["start_ns"] + r["shift_ns"], r["end_ns"] + r["shift_ns"]] for r in ranges],
        "hovertext": [_phase_hover(r, when, reference) for r in ranges], "hoverinfo": "text",
        "marker": {"color": [color[r["phase"]] for r in ranges], "line": {"color": "#5b6675", "width": 0.5}},
    }]


def clock_note(clocks: list[dict]) -> str:
    """Whether the role's ranks are drawn on one clock, by clock_offsets' rule, in words."""
    if not clocks:
        return ""
    impossible = sum(c["impossible_instances"] for c in clocks)
    after = sum(c["impossible_after_shift"] for c in clocks)
    reference = clocks[0]["reference_rank"]
    if clocks[0]["aligned"]:
        return (f"Clocks aligned: on the recorded clocks the ranks' collectives are impossible {impossible:,} times "
                f"(counted per rank: a collective that ended on one rank before another rank had joined it) and "
                f"{after:,} times once each rank is shifted by its offset, so every rank is drawn on rank "
                f"{reference}'s clock, its recorded times less its offset (clock_offsets.applied_offset_ns, in the "
                "clock table).")
    if impossible:
        return (f"Clocks drawn as recorded: the ranks' collectives are impossible {impossible:,} times (counted per "
                f"rank: a collective that ended on one rank before another rank had joined it) and still {after:,} "
                "times once shifted by the offsets, not under half: the instances disagree by more than one offset "
                "per rank explains (clock_offsets), so no rank is shifted.")
    return ("Clocks drawn as recorded: no collective ended on one rank before another rank joined it, so nothing "
            "shows the clocks disagree; the offsets in the clock table cannot be told from lateness (clock_offsets).")


def _shift_text(rank: int, shift_ns: int, reference: int | None) -> str:
    if not shift_ns:
        return ""
    return f"<br>on rank {reference}'s clock: rank {rank}'s recorded time less {shift_ns / 1e6:,.3f} ms"


def _role_figure(index: int, clock: str, role: str, color: str, spans: list[dict], lanes: list[dict],
                 params: dict, reduced: str, binned: bool = False, phases: list[dict] | None = None,
                 clocks: list[dict] | None = None) -> Figure:
    """One role on its own time axis: its spans per rank, each rank's phase ranges and device
    lanes under them."""
    epoch = clock == "epoch"
    ranges = _phase_ranges(phases or [])
    axis = _Axis(epoch, [(r["start_ns"], r["start_ns"] + r["dur_ns"]) for r in spans]
                 + [(r["start_ns"], r["start_ns"] + (r["width_ns"] if binned else r["dur_ns"])) for r in lanes]
                 + [(r["start_ns"], r["end_ns"]) for r in ranges])
    ranks = sorted({r["rank_id"] for r in spans + lanes + ranges})
    present = {(x["rank_id"], x["lane"]) for x in lanes}
    lane_names = {k: [lane for lane in LANES if (k, lane) in present] for k in ranks}
    with_phases = {r["rank_id"] for r in ranges}
    span_row = {k: label(f"{role} · rank {k}") for k in ranks}
    rows = [row for k in ranks
            for row in [span_row[k]] + ([label(f"rank {k} · phases")] if k in with_phases else [])
            + [label(f"rank {k} · {lane}") for lane in lane_names[k]]]
    reference = clocks[0]["reference_rank"] if clocks else None
    shift_of = {c["rank_id"]: c["applied_offset_ns"] for c in clocks or []}  # what the device queries subtracted

    def when(ns: int) -> str:
        return f"{utc_text(ns)} UTC" if epoch else f"{ns / 1e9:,.6f} s on the {label(clock)} clock"

    traces = _bars(spans, axis, lambda r: span_row[r["rank_id"]], label(role), color,
                   lambda r: (f"{label(r['role'])} · rank {r['rank_id']}<br>{label(r['source'])}: {label(r['name'])}"
                              f"<br>capture {label(r['capture'])}<br>start {when(r['start_ns'])}"
                              f"<br>{r['dur_ns'] / 1e6:,.3f} ms"
                              + _shift_text(r["rank_id"], r["shift_ns"], reference)))
    if ranges:
        traces += _phase_bars(ranges, axis, when, reference)
    for lane in LANES:
        mine = [r for r in lanes if r["lane"] == lane]
        if mine and binned:
            traces += _binned_bars(mine, axis, lane)
        elif mine:
            traces += _bars(mine, axis, lambda r: label(f"rank {r['rank_id']} · {r['lane']}"),
                            f"device {lane}", LANE_COLORS[lane],
                            lambda r: (f"rank {r['rank_id']} · device {r['lane']}"
                                       + (f" ({r['ops']:,} ops, overlapping ones once)" if r["ops"] else "")
                                       + f"<br>start {when(r['start_ns'])}<br>{r['dur_ns'] / 1e6:,.3f} ms"
                                       + _shift_text(r["rank_id"], shift_of.get(r["rank_id"], 0), reference)))
    xaxis, shapes, annotations = axis.layout(role, clock)
    layout = {
        "barmode": "overlay", "height": 170 + 26 * len(rows), "margin": {"l": 220, "r": 20, "t": 10, "b": 70},
        "xaxis": xaxis,
        "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": rows,
                  "autorange": "reversed", "automargin": True},
        "legend": {"orientation": "h", "y": 1.06 if annotations else 1.0, "yanchor": "bottom"}, "showlegend": True,
        "shapes": shapes, "annotations": annotations,
        "uniformtext": {"mode": "hide", "minsize": 9},  # a phase's name only where it fits its bar
    }
    note = f"{len(spans):,} spans on {len(ranks)} ranks"
    if ranges:
        note += (f", {len(ranges):,} phase ranges (their CPU side; hover one for the device time of the work "
                 "launched in it, phase_device_time)")
    if binned:
        note += (f", each rank's device lanes in {BINS} time bins: a bar is as long as the device was busy in its "
                 "bin (compute, communication: the union of kernels, as device_time counts them; idle: no device "
                 "work), so a rank's bars add up to its device time.")
    else:
        note += f", {len(lanes):,} device bars (compute and communication: union of kernels; idle: gaps)." if lanes \
            else "."
    if reduced:
        note += " " + reduced
    if clocks and epoch:
        note += " " + clock_note(clocks)
    clock_title = "epoch clock (UTC)" if epoch else f"clock {clock}: its own axis, not comparable with UTC"
    lane_query = query_text(Q.DEVICE_BINS, {**params, "bins": BINS}) if binned else query_text(Q.DEVICE_LANES, params)
    queries = ([query_text(Q.ROLE_TIMELINE, params)] + ([lane_query] if lanes else [])
               + ([query_text(Q.PHASE_RANGES, {"run": params["run"], "max_phases": MAX_PHASES})] if ranges else []))
    return Figure(f"role-timeline-{index}", f"{label(role)} · {clock_title}", note,
                  script_json({"data": traces, "layout": layout}), queries)


def role_timeline_figures(s: ReportSession, run: str,
                          clocks: list[dict] | None = None) -> list[tuple[str, Figure]]:
    """(role, its Gantt) per (clock, role), epoch first, each role on its own time axis (roles run
    minutes apart and their spans last milliseconds: on one shared axis they would be
    slivers); [] when the run has none. clocks: the run's clock_offsets rows (Q.CLOCK_OFFSETS)."""
    params = {"run": run, "max_spans": MAX_SPANS}
    spans = s.rows(Q.ROLE_TIMELINE, params)
    lanes = s.rows(Q.DEVICE_LANES, params) if spans else []
    phases = s.rows(Q.PHASE_RANGES, {"run": run, "max_phases": MAX_PHASES}) if spans else []
    clocks = clocks if clocks is not None else (s.rows(Q.CLOCK_OFFSETS, {"run": run}) if spans else [])
    # More device bars than the page draws: a subset (the longest, mostly idle gaps) would
    # show a busy device as idle, so every lane is drawn as busy time per bin instead.
    binned = bool(lanes) and lanes[0]["total_bars"] > len(lanes)
    if binned:
        lanes = s.rows(Q.DEVICE_BINS, {"run": run, "bins": BINS})
    clocks_of = clocks or []
    phase_note = (f"Data reduced: the {len(phases):,} longest of {phases[0]['total_ranges']:,} phase ranges are "
                  "drawn; the phase tables count them all." if phases and phases[0]["total_ranges"] > MAX_PHASES
                  else "")
    clock_names = sorted({r["clock"] for r in spans}, key=lambda c: (c != "epoch", c))
    roles = sorted({r["role"] for r in spans})
    colors = {role: ROLE_COLORS[k % len(ROLE_COLORS)] for k, role in enumerate(roles)}
    figures: list[tuple[str, Figure]] = []
    for clock in clock_names:
        drawn = [r for r in spans if r["clock"] == clock]
        reduced = [f"Data reduced: the {len(drawn):,} longest of {drawn[0]['total_spans']:,} spans of this clock "
                   "are drawn."] if drawn[0]["total_spans"] > len(drawn) else []
        if binned and clock == "epoch":
            reduced.append("The device bars are too many to draw one by one: each lane shows its busy time per bin.")
        if phase_note and clock == "epoch":
            reduced.append(phase_note)
        for role in sorted({r["role"] for r in drawn}):
            mine = [r for r in drawn if r["role"] == role]
            epoch = clock == "epoch"
            device = [r for r in lanes if r["role"] == role] if epoch else []
            figures.append((role, _role_figure(len(figures), clock, role, colors[role], mine, device, params,
                                               " ".join(reduced), binned,
                                               [r for r in phases if r["role"] == role] if epoch else [],
                                               [c for c in clocks_of if c["role"] == role])))
    return figures
