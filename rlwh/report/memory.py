"""The memory timeline of one rank: one panel per (capture, device, clock), its reduced
lines, allocation bars and hover data (the figure itself is memory_figure's).

A rank with a million allocations has two million timeline events, too many for a
browser. The lines keep the min and max of each time bucket (so the peak survives),
the bars the largest allocation of each bucket, and the page says so. Strings (op
names, stack frames) are sent once each and referenced by index, which keeps such a
page at a few MB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlwh.report import memory_figure as F
from rlwh.report import queries as Q
from rlwh.report.context import (
    BUCKETS,
    HOVER_BUDGET,
    MAX_BARS,
    MAX_POINTS,
    MIB,
    MemoryPanel,
    ReportSession,
    label,
    query_text,
    script_json,
    utc_text,
)
from rlwh.stacks import record_stacks_params


class _Strings:
    """Each distinct string once; rows refer to it by index (-1 for NULL)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int:
        if text is None:
            return -1
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


USAGE_COMPONENTS = ("PTA+GE", "PTA")  # memory_usage's component drawn, the first one present
MAX_MODULES = 6  # CANN modules drawn, those that reserved the most


def memory_panels(s: ReportSession, run: str, role: str, rank_id: int) -> list[MemoryPanel]:
    """One panel per (capture, device, clock) of the rank."""
    slice_params = {"run": run, "role": role, "rank_id": rank_id}
    s.rows(Q.MEMORY_SLICE, slice_params)
    tables = {"memory_usage": bool(s.rows(Q.HAS_MEMORY_USAGE)[0]["present"]),
              "npu_module_memory": bool(s.rows(Q.HAS_NPU_MODULE_MEMORY)[0]["present"])}
    no_stacks = {r["capture"]: r for r in s.rows(Q.NO_STACK_CAPTURES, {"run": run, **record_stacks_params()})
                 if r["role"] == role and r["rank_id"] == rank_id}
    try:
        shown = s.rows(Q.MEMORY_PANELS)
        panels = [_panel(s, i, p, slice_params, tables) for i, p in enumerate(shown)]
    finally:
        s.rows("drop table if exists _rlwh_memory_slice")
    for panel, p in zip(panels, shown):
        if p["capture"] in no_stacks:
            r = no_stacks[p["capture"]]
            panel.no_stacks = (f"This capture holds no call stacks: it was profiled without with_stack, so its "
                               f"{r['ops']:,} ops and the memory they allocated have no user_frame or "
                               f"call_stack_top. Record them with {r['record_stacks_with']}.")
    return panels


def _usage(s: ReportSession, where: dict, slice_params: dict) -> tuple[str | None, list[dict], list]:
    """The memory_usage component to draw beside the live line, its reduced rows and queries."""
    params = {**slice_params, **where}
    present = {r["component"] for r in s.rows(Q.MEMORY_USAGE_COMPONENTS, params)}
    wanted = ((s.usage_component,) if s.usage_component else ()) + USAGE_COMPONENTS
    component = next((c for c in wanted if c in present), None)
    if component is None:
        return None, [], [query_text(Q.MEMORY_USAGE_COMPONENTS, params)]
    usage_params = {**params, "component": component, "max_points": MAX_POINTS, "buckets": BUCKETS}
    return component, s.rows(Q.MEMORY_USAGE, usage_params), [query_text(Q.MEMORY_USAGE_COMPONENTS, params),
                                                             query_text(Q.MEMORY_USAGE, usage_params)]


def _modules(s: ReportSession, where: dict, slice_params: dict) -> tuple[list[dict], list]:
    """What the CANN modules reserved (npu_module_memory), the modules that reserved most."""
    params = {**slice_params, **where, "max_modules": MAX_MODULES, "max_points": MAX_POINTS, "buckets": BUCKETS}
    return s.rows(Q.NPU_MODULE_MEMORY, params), [query_text(Q.NPU_MODULE_MEMORY, params)]


@dataclass
class _PanelRows:
    """What one panel's queries returned, and the queries as the page shows them."""

    lines: list[dict]
    live: list[dict]
    peak: int
    bars: list[dict]
    hover: dict[int, list[int]]
    stride: int
    blocks: list[dict]
    stacks: list[dict]
    component: str | None
    usage: list[dict]
    modules: list[dict]
    queries: list


def _query(s: ReportSession, p: dict, slice_params: dict, tables: dict[str, bool]) -> _PanelRows:
    where = {"capture": p["capture"], "device": p["device"], "clock": p["clock"]}
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
    on_time = p["clock"] == "epoch"  # the allocator's samples are timed: nothing to set beside positions
    timed_where = {"capture": p["capture"], "device": p["device"]}
    component, usage, usage_queries = (_usage(s, timed_where, slice_params)
                                       if tables["memory_usage"] and on_time else (None, [], []))
    modules, module_queries = (_modules(s, timed_where, slice_params)
                               if tables["npu_module_memory"] and on_time else ([], []))
    queries = [
        query_text(Q.MEMORY_SLICE, slice_params), query_text(Q.MEMORY_PANELS, {}),
        query_text(Q.MEMORY_LINES, line_params), query_text(Q.MEMORY_BARS, bar_params),
        query_text(Q.MEMORY_HOVER, hover_params), query_text(Q.MEMORY_BLOCKS_BY_SEQ, {**where, "seqs": block_seqs}),
        query_text(Q.CALL_STACKS, {"stack_ids": stack_ids}), *usage_queries, *module_queries,
    ]
    return _PanelRows(lines, live, peak, bars, hover, stride, blocks, stacks, component, usage, modules, queries)


def _panel(s: ReportSession, i: int, p: dict, slice_params: dict, tables: dict[str, bool]) -> MemoryPanel:
    q = _query(s, p, slice_params, tables)
    live, peak = q.live, q.peak
    axis = F.TimeAxis.of(p)
    names, tops, frames = _Strings(), _Strings(), _Strings()
    stack_index = {r["stack_id"]: k for k, r in enumerate(q.stacks)}
    stack_of = lambda sid: stack_index.get(sid, -1)  # noqa: E731
    block_index = {r["seq"]: k for k, r in enumerate(q.blocks)}
    points_with_lists = set(q.hover) | ({k for k in range(len(live)) if k % q.stride == 0 or k == peak})
    data = {
        "unit": axis.unit, "names": names.items, "tops": tops.items, "frames": frames.items,
        "stacks": [[frames(f) for f in r["stack"].split("\n")] for r in q.stacks],
        "live": {
            "trace": 0, "peak": peak,
            "bytes": [int(r["live_bytes"]) for r in live],
            "name": [names(F.op_name(r)) for r in live],
            "stack": [stack_of(r["stack_id"]) for r in live],
            "event": [r["event"] for r in live],
            "hover": [[block_index[seq] for seq in q.hover.get(k, [])] if k in points_with_lists else None
                      for k in range(len(live))],
        },
        "blocks": {
            "name": [names(F.op_name(r)) for r in q.blocks],
            "size": [int(r["size_bytes"]) for r in q.blocks],
            "top": [tops(r["call_stack_top"]) for r in q.blocks],
            "user": [tops(r["user_frame"]) for r in q.blocks],
            "source": [r["stack_source"] for r in q.blocks],
            "allocator": [r["allocator"] for r in q.blocks],
            "stack": [stack_of(r["stack_id"]) for r in q.blocks],
        },
    }
    data["figure"] = _figure(p, q, axis, lambda r: [stack_of(r["stack_id"]), names(F.op_name(r)),
                                                    tops(r["call_stack_top"]), int(r["size_bytes"]),
                                                    tops(r["user_frame"])])
    notes = _reduction_notes(p, live, q.bars, q.stride)
    if axis.has_tail:
        notes.append(f"The view ends at the last allocation: {axis.tail_releases:,} release(s) follow until "
                     f"{axis.x(axis.last_ns):,.3f} {axis.unit} (shaded; double-click the chart to see them).")
    return MemoryPanel(f"memory-{i}", f"{p['capture']} · {p['device']}", _note(p, live[peak], axis),
                       " ".join(notes) or None, script_json(data), q.queries)


def _note(p: dict, peak_row: dict, axis: F.TimeAxis) -> str:
    peak_mib = peak_row["live_bytes"] / MIB
    if p["clock"] == "epoch":
        return (f"{p['events']:,} events from {utc_text(p['first_ns'])} to {utc_text(p['last_ns'])} UTC; "
                f"peak live {peak_mib:,.1f} MiB at {axis.x(peak_row['ts_ns']):,.3f} {axis.unit}.")
    return (f"{p['events']:,} events of a memory snapshot's trace, which records no time: the x axis is each "
            f"event's position in the trace (clock {p['clock']}); peak live {peak_mib:,.1f} MiB at position "
            f"{axis.x(peak_row['ts_ns']):,.0f}.")


def _figure(p: dict, q: _PanelRows, axis: F.TimeAxis, customdata) -> dict:
    """Rows top to bottom: live bytes, each allocator, memory_usage, CANN modules, allocations."""
    lines, usage, component, modules, bars = q.lines, q.usage, q.component, q.modules, q.bars
    traces = F.live_traces(q.live, axis, q.peak)
    rows = [F.Row("y", "live MiB<br>(all blocks)", 2.6)]
    for allocator in p["allocators"] or []:
        mine = [r for r in lines if r["series"] == "allocator" and r["allocator"] == allocator]
        yaxis = f"y{len(rows) + 1}"
        row_traces = F.allocator_traces(mine, allocator, yaxis, axis)
        if len(row_traces) == 1 and len(p["allocators"]) == 1:
            continue  # its live bytes alone, no totals: the live line again
        if row_traces:
            rows.append(F.Row(yaxis, f"{label(allocator)} MiB", 1.4))
            traces += row_traces
    if usage:
        assert component is not None  # _usage finds rows only for a component
        rows.append(F.Row(f"y{len(rows) + 1}", f"memory_usage<br>{label(component)} MiB", 1.4))
        traces += F.usage_traces(usage, component, rows[-1].axis, axis)
    if modules:
        rows.append(F.Row(f"y{len(rows) + 1}", "CANN modules<br>reserved MiB", 1.4))
        traces += F.module_traces(modules, rows[-1].axis, axis)
    if bars:
        rows.append(F.Row(f"y{len(rows) + 1}", "allocation MiB", 1.4))
        traces += F.bar_traces(bars, axis, rows[-1].axis, F.op_colors(bars), customdata)
    title = (f"{axis.unit} since {utc_text(axis.t0)} UTC" if axis.unit in ("ms", "s")
             else f"position in the snapshot's trace (clock {label(p['clock'])}: no time recorded)")
    layout = F.layout(rows, axis, q.live[q.peak]["ts_ns"], title)
    return {"data": traces, "layout": layout}


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
