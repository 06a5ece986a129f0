"""The memory timeline of one rank: reduced lines, allocation bars and hover data.

A rank with a million allocations has two million timeline events, too many for a
browser. The lines keep the min and max of each time bucket (so the peak survives),
the bars the largest allocation of each bucket, and the page says so. Strings (op
names, stack frames) are sent once each and referenced by index, which keeps such a
page at a few MB.
"""

from __future__ import annotations

import math

from rlwh.report import queries as Q
from rlwh.report.context import (
    BUCKETS,
    HOVER_BUDGET,
    MAX_BARS,
    MAX_POINTS,
    MIB,
    OP_COLORS,
    MemoryPanel,
    ReportSession,
    label,
    mib,
    ms,
    query_text,
    script_json,
    utc_text,
)

SERIES = (
    ("live", "live bytes (memory_timeline.live_bytes)", {"color": "#1f77b4", "width": 2}),
    ("allocated", "allocator allocated", {"color": "#2ca02c", "width": 1, "dash": "dot"}),
    ("reserved", "allocator reserved", {"color": "#9467bd", "width": 1, "dash": "dash"}),
)
VALUE = {"live": "live_bytes", "allocated": "allocator_allocated_bytes", "reserved": "allocator_reserved_bytes"}


class _Strings:
    """Each distinct string once; rows refer to it by index (-1 for NULL)."""

    def __init__(self):
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int:
        if text is None:
            return -1
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


def memory_panels(s: ReportSession, run: str, role: str, rank_id: int) -> list[MemoryPanel]:
    """One panel per (capture, device) of the rank."""
    slice_params = {"run": run, "role": role, "rank_id": rank_id}
    s.rows(Q.MEMORY_SLICE, slice_params)
    try:
        return [_panel(s, i, p, slice_params) for i, p in enumerate(s.rows(Q.MEMORY_PANELS))]
    finally:
        s.rows("drop table if exists _rlwh_memory_slice")


def _panel(s: ReportSession, i: int, p: dict, slice_params: dict) -> MemoryPanel:
    where = {"capture": p["capture"], "device": p["device"]}
    line_params = {**where, "max_points": MAX_POINTS, "buckets": BUCKETS}
    bar_params = {**where, "max_bars": MAX_BARS, "buckets": BUCKETS}
    lines = s.rows(Q.MEMORY_LINES, line_params)
    bars = s.rows(Q.MEMORY_BARS, bar_params)
    live = [r for r in lines if r["series"] == "live"]
    peak = max(range(len(live)), key=lambda k: (live[k]["live_bytes"], -k))
    hover_params = {**where, "point_seqs": [r["seq"] for r in live], "stride": 1, "keep_point": peak}
    cost = s.rows(Q.MEMORY_HOVER_COST, hover_params)[0]["block_points"]
    stride = max(1, math.ceil(cost / HOVER_BUDGET))
    hover_params["stride"] = stride
    hover = {r["point"]: r["top_alloc_seqs"] for r in s.rows(Q.MEMORY_HOVER, hover_params)}
    block_seqs = sorted({seq for seqs in hover.values() for seq in seqs})
    blocks = s.rows(Q.MEMORY_BLOCKS_BY_SEQ, {**where, "seqs": block_seqs}) if block_seqs else []
    stack_ids = sorted({r["stack_id"] for r in [*live, *bars, *blocks] if r["stack_id"] is not None})
    stacks = s.rows(Q.CALL_STACKS, {"stack_ids": stack_ids}) if stack_ids else []

    t0 = p["first_ns"]
    names, tops, frames = _Strings(), _Strings(), _Strings()
    stack_index = {r["stack_id"]: k for k, r in enumerate(stacks)}
    stack_of = lambda sid: stack_index.get(sid, -1)  # noqa: E731
    block_index = {r["seq"]: k for k, r in enumerate(blocks)}
    points_with_lists = set(hover) | ({k for k in range(len(live)) if k % stride == 0 or k == peak})
    data = {
        "names": names.items, "tops": tops.items, "frames": frames.items,
        "stacks": [[frames(f) for f in r["stack"].split("\n")] for r in stacks],
        "live": {
            "trace": 0, "peak": peak,
            "bytes": [int(r["live_bytes"]) for r in live],
            "name": [names(r["name"] or "(unknown op)") for r in live],
            "stack": [stack_of(r["stack_id"]) for r in live],
            "event": [r["event"] for r in live],
            "hover": [[block_index[seq] for seq in hover.get(k, [])] if k in points_with_lists else None
                      for k in range(len(live))],
        },
        "blocks": {
            "name": [names(r["name"] or "(unknown op)") for r in blocks],
            "size": [int(r["size_bytes"]) for r in blocks],
            "top": [tops(r["call_stack_top"]) for r in blocks],
            "stack": [stack_of(r["stack_id"]) for r in blocks],
        },
    }
    traces = _line_traces(lines, t0) + _bar_traces(bars, t0, p, names, tops, stack_of)
    peak_row = live[peak]
    traces.append({"type": "scatter", "mode": "markers", "name": "peak", "x": [ms(peak_row["ts_ns"], t0)],
                   "y": [mib(peak_row["live_bytes"])], "marker": {"color": "#d62728", "size": 10},
                   "hovertemplate": "peak %{y:,.1f} MiB at %{x} ms<extra></extra>"})
    data["figure"] = {"data": traces, "layout": _layout(t0, ms(p["last_ns"], t0))}
    notes = _reduction_notes(p, live, bars, stride)
    title = f"{p['capture']} · {p['device']}"
    note = (f"{p['events']:,} events from {utc_text(p['first_ns'])} to {utc_text(p['last_ns'])} UTC; "
            f"peak live {peak_row['live_bytes'] / MIB:,.1f} MiB at {ms(peak_row['ts_ns'], t0):,.3f} ms.")
    queries = [
        query_text(Q.MEMORY_SLICE, slice_params), query_text(Q.MEMORY_LINES, line_params),
        query_text(Q.MEMORY_BARS, bar_params), query_text(Q.MEMORY_HOVER, hover_params),
        query_text(Q.MEMORY_BLOCKS_BY_SEQ, {**where, "seqs": block_seqs}),
        query_text(Q.CALL_STACKS, {"stack_ids": stack_ids}),
    ]
    return MemoryPanel(f"memory-{i}", title, note, " ".join(notes) or None, script_json(data), queries)


def _line_traces(lines: list[dict], t0: int) -> list[dict]:
    traces = []
    for series, name, line in SERIES:
        rows = [r for r in lines if r["series"] == series and r[VALUE[series]] is not None]
        if not rows and series != "live":
            continue
        trace = {"type": "scatter", "mode": "lines", "name": name, "line": {"shape": "hv", **line},
                 "x": [ms(r["ts_ns"], t0) for r in rows], "y": [mib(r[VALUE[series]]) for r in rows]}
        if series == "live":
            trace["hoverinfo"] = "text"  # report.js fills hovertext with the largest live blocks
        else:
            trace["hovertemplate"] = f"{name}: %{{y:,.1f}} MiB at %{{x}} ms<extra></extra>"
        traces.append(trace)
    return traces


def _bar_traces(bars: list[dict], t0: int, p: dict, names: _Strings, tops: _Strings, stack_of) -> list[dict]:
    """One trace per op among the OP_COLORS with the most bytes, then one for the rest."""
    if not bars:
        return []
    by_op: dict[str, int] = {}
    for r in bars:
        by_op[r["name"] or "(unknown op)"] = by_op.get(r["name"] or "(unknown op)", 0) + int(r["size_bytes"])
    colored = sorted(by_op, key=lambda n: (-by_op[n], n))[:OP_COLORS]
    groups: dict[str, list[dict]] = {n: [] for n in [*colored, "other ops"]}
    for r in bars:
        op = r["name"] or "(unknown op)"
        groups[op if op in groups and op != "other ops" else "other ops"].append(r)
    span_ms = max((p["last_ns"] - p["first_ns"]) / 1e6, 1e-3)
    width = span_ms / max(len(bars), 200) * 0.9
    traces = []
    for op, rows in groups.items():
        if not rows:
            continue
        traces.append({
            "type": "bar", "name": label(op), "xaxis": "x", "yaxis": "y2", "width": width,
            "x": [ms(r["ts_ns"], t0) for r in rows], "y": [mib(r["size_bytes"]) for r in rows],
            "customdata": [[stack_of(r["stack_id"]), names(r["name"] or "(unknown op)"), tops(r["call_stack_top"]),
                            int(r["size_bytes"])] for r in rows],
            "hoverinfo": "text",  # report.js fills hovertext: op, size, call_stack_top
        })
    return traces


def _layout(t0: int, span_ms: float) -> dict:
    pad = max(span_ms, 1e-3) * 0.01  # an explicit range: Plotly pads a lone bar by a whole unit
    return {
        "height": 640, "hovermode": "closest", "barmode": "overlay",
        "margin": {"l": 70, "r": 20, "t": 30, "b": 50},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        "xaxis": {"title": {"text": f"ms since {utc_text(t0)} UTC"}, "anchor": "y2", "zeroline": False,
                  "range": [-pad, span_ms + pad]},
        "yaxis": {"title": {"text": "MiB"}, "domain": [0.36, 1]},
        "yaxis2": {"title": {"text": "allocation MiB"}, "domain": [0, 0.28]},
    }


def _reduction_notes(p: dict, live: list[dict], bars: list[dict], stride: int) -> list[str]:
    notes = []
    if p["events"] > MAX_POINTS:
        notes.append(f"Data reduced: the lines draw {len(live):,} of {p['events']:,} events, the min and max of "
                     f"each of {BUCKETS:,} time buckets, so the peak is kept.")
    allocations = bars[0]["allocations"] if bars else 0
    if allocations > MAX_BARS:
        notes.append(f"Bars: the largest allocation of each time bucket, {len(bars):,} of {allocations:,}.")
    if stride > 1:
        notes.append(f"Live blocks are listed at every {stride}th point of the line and at the peak.")
    return notes
