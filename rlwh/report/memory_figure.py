"""The plotly figure of one memory panel: rows that share one time axis.

Top to bottom: live bytes of every block of the device (the page's answer, on its own y
axis so it never lies flat under totals 100x larger); one row per allocator (PTA, GE,
torch) with that allocator's own live bytes against the totals it reported, never one
allocator's totals against another's blocks; the component of memory_usage the profiler
recorded (memory_record.csv), when there is one; what each CANN module reserved
(npu_module_mem.csv), when recorded; the allocations as bars.

The x axis follows the allocations: releases long after the last allocation (a block
freed at the end of the capture) are left outside the initial view and marked.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlwh.report.context import label, mib

# Colors: the live line, the peak and "other ops" each have one no op bar uses.
LIVE_COLOR = "#1f3a93"
PEAK_COLOR = "#d62728"
OTHER_OPS_COLOR = "#b0b0b0"
ALLOCATED_COLOR = "#222222"
RESERVED_COLOR = "#7a7a7a"
USAGE_COLORS = ("#b35806", "#8073ac")  # memory_usage allocated, reserved
MODULE_COLORS = ("#00441b", "#238b45", "#66c2a4", "#6a51a3", "#9e9ac8", "#8c510a")  # CANN modules, most first
OP_PALETTE = ("#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#9c755f", "#ff9da7", "#a0cbe8")
TAIL_SHARE = 0.1  # a release tail longer than this share of the allocations' span is left out of view


@dataclass
class TimeAxis:
    """Times of one panel as numbers on the x axis: `unit` since `t0`, range and tail."""

    t0: int
    unit: str  # "ms" or "s"; "position" on a clock that is not time (a snapshot's trace order)
    end_ns: int  # right end of the initial view
    last_ns: int
    tail_releases: int

    @classmethod
    def of(cls, p: dict) -> TimeAxis:
        first, last, last_alloc = p["first_ns"], p["last_ns"], p["last_alloc_ns"] or p["last_ns"]
        alloc_span = max(last_alloc - first, 1)
        cut = p["tail_releases"] > 0 and last - last_alloc > TAIL_SHARE * alloc_span
        end = last_alloc if cut else last
        if p.get("clock", "epoch") != "epoch":
            return cls(0, "position", end, last, p["tail_releases"] if cut else 0)
        unit = "s" if end - first >= 10_000_000_000 else "ms"
        return cls(first, unit, end, last, p["tail_releases"] if cut else 0)

    def x(self, ns: int) -> float:
        scale = {"s": 1e9, "ms": 1e6}.get(self.unit, 1)
        return round((ns - self.t0) / scale, 9)

    @property
    def has_tail(self) -> bool:
        return self.tail_releases > 0


@dataclass
class Row:
    """One row of the figure: its y axis name, title and relative height."""

    axis: str  # "y", "y2", ...
    title: str
    weight: float


def op_name(r: dict) -> str:
    """The op a block is shown under; a snapshot's blocks have none (the allocator records no op)."""
    if r["name"]:
        return r["name"]
    return "(snapshot block)" if r.get("allocator") == "snapshot" else "(unknown op)"


def op_colors(bars: list[dict]) -> dict[str, str]:
    """The ops with the most allocated bytes, one palette color each; the rest are "other ops"."""
    by_op: dict[str, int] = {}
    for r in bars:
        op = op_name(r)
        by_op[op] = by_op.get(op, 0) + int(r["size_bytes"])
    top = sorted(by_op, key=lambda n: (-by_op[n], n))[: len(OP_PALETTE)]
    return dict(zip(top, OP_PALETTE))


def live_traces(live: list[dict], axis: TimeAxis, peak: int) -> list[dict]:
    """The live line (report.js fills its hovertext with the largest live blocks) and the peak."""
    row = live[peak]
    return [
        {"type": "scatter", "mode": "lines", "name": "live bytes, all blocks", "yaxis": "y",
         "line": {"shape": "hv", "color": LIVE_COLOR, "width": 2},
         "x": [axis.x(r["ts_ns"]) for r in live], "y": [mib(r["live_bytes"]) for r in live], "hoverinfo": "text"},
        {"type": "scatter", "mode": "markers", "name": "peak", "yaxis": "y", "x": [axis.x(row["ts_ns"])],
         "y": [mib(row["live_bytes"])],
         "marker": {"color": PEAK_COLOR, "size": 14, "symbol": "star", "line": {"color": "#000", "width": 1}},
         "hovertemplate": f"peak %{{y:,.1f}} MiB at %{{x}} {axis.unit}<extra></extra>"},
    ]


def allocator_traces(rows: list[dict], allocator: str, yaxis: str, axis: TimeAxis) -> list[dict]:
    """One allocator's live bytes, allocated and reserved, from its own rows only."""
    name = label(allocator)
    series: tuple[tuple[str, str, dict], ...] = (
        ("allocator_live_bytes", f"{name}: live bytes of its blocks", {"color": LIVE_COLOR, "width": 1.5}),
        ("allocator_allocated_bytes", f"{name}: allocated (its total)", {"color": ALLOCATED_COLOR, "width": 1,
                                                                         "dash": "dot"}),
        ("allocator_reserved_bytes", f"{name}: reserved (its total)", {"color": RESERVED_COLOR, "width": 1,
                                                                       "dash": "dash"}),
    )
    traces = []
    for column, title, line in series:
        points = [r for r in rows if r[column] is not None]
        if not points:
            continue
        traces.append({
            "type": "scatter", "mode": "lines", "name": title, "yaxis": yaxis,
            "line": {"shape": "hv", **line},
            "x": [axis.x(r["ts_ns"]) for r in points], "y": [mib(r[column]) for r in points],
            "hovertemplate": f"{title}: %{{y:,.1f}} MiB at %{{x}} {axis.unit}<extra></extra>",
        })
    return traces


def usage_traces(rows: list[dict], component: str, yaxis: str, axis: TimeAxis) -> list[dict]:
    """memory_usage's totals of one component (memory_record.csv), as the profiler sampled them."""
    name = label(component)
    traces = []
    for (column, what), color in zip((("total_allocated_bytes", "allocated"), ("total_reserved_bytes", "reserved")),
                                     USAGE_COLORS):
        points = [r for r in rows if r[column] is not None]
        if points:
            title = f"memory_usage {name}: {what}"
            traces.append({
                "type": "scatter", "mode": "lines", "name": title, "yaxis": yaxis,
                "line": {"shape": "hv", "color": color, "width": 1.5, "dash": "dot" if what == "allocated" else "dash"},
                "x": [axis.x(r["ts_ns"]) for r in points], "y": [mib(r[column]) for r in points],
                "hovertemplate": f"{title}: %{{y:,.1f}} MiB at %{{x}} {axis.unit}<extra></extra>",
            })
    return traces


def module_traces(rows: list[dict], yaxis: str, axis: TimeAxis) -> list[dict]:
    """One line per CANN module: the device memory it reserved (npu_module_memory), most first."""
    peak: dict[str, int] = {}
    for r in rows:
        peak[r["module"]] = max(peak.get(r["module"], 0), int(r["total_reserved_bytes"]))
    traces = []
    for module, color in zip(sorted(peak, key=lambda m: (-peak[m], m)), MODULE_COLORS):
        points = [r for r in rows if r["module"] == module]
        title = f"CANN {label(module)}: reserved"
        traces.append({
            "type": "scatter", "mode": "lines", "name": title, "yaxis": yaxis,
            "line": {"shape": "hv", "color": color, "width": 1.5},
            "x": [axis.x(r["ts_ns"]) for r in points], "y": [mib(r["total_reserved_bytes"]) for r in points],
            "hovertemplate": f"{title}: %{{y:,.1f}} MiB at %{{x}} {axis.unit}<extra></extra>",
        })
    return traces


def bar_traces(bars: list[dict], axis: TimeAxis, yaxis: str, colors: dict[str, str], customdata) -> list[dict]:
    """One trace per colored op, then "other ops"; report.js fills hovertext from customdata."""
    groups: dict[str, list[dict]] = {op: [] for op in colors}
    groups["other ops"] = []
    for r in bars:
        op = op_name(r)
        groups[op if op in colors else "other ops"].append(r)
    shown = max(axis.end_ns - axis.t0, 1000)
    per_unit = 1e9 if axis.unit == "s" else 1e6
    visible = sum(1 for r in bars if r["ts_ns"] <= axis.end_ns)
    width = shown / per_unit / max(visible, 200) * 0.9
    traces = []
    for op, rows in groups.items():
        if rows:
            traces.append({
                "type": "bar", "name": label(op), "yaxis": yaxis, "width": width, "legend": "legend2",
                "marker": {"color": colors.get(op, OTHER_OPS_COLOR)},
                "x": [axis.x(r["ts_ns"]) for r in rows], "y": [mib(r["size_bytes"]) for r in rows],
                "customdata": [customdata(r) for r in rows], "hoverinfo": "text",
            })
    return traces


def layout(rows: list[Row], axis: TimeAxis, peak_ns: int, time_title: str) -> dict:
    """Stacked rows (first on top) sharing one x axis, the peak's time marked across all rows."""
    gap = 0.05
    total = sum(r.weight for r in rows)
    usable = 1 - gap * (len(rows) - 1)
    top = 1.0
    out: dict = {
        "height": 230 + int(115 * total), "hovermode": "closest", "barmode": "overlay",
        "margin": {"l": 80, "r": 20, "t": 30, "b": 130},
        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "font": {"size": 11}},
        # the ops' colours under the allocation bars they name, not in the lines' legend on top
        "legend2": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0,
                    "font": {"size": 11}, "title": {"text": "allocations by op:", "font": {"size": 11}}},
        "shapes": [],
    }
    for row in rows:
        height = usable * row.weight / total
        key = "yaxis" if row.axis == "y" else "yaxis" + row.axis[1:]
        out[key] = {"title": {"text": row.title, "font": {"size": 12}}, "domain": [max(top - height, 0), top],
                    "rangemode": "tozero", "tickformat": ",~r", "automargin": True}
        top -= height + gap
    bottom = rows[-1].axis
    end = axis.x(axis.end_ns)
    pad = max(end, 1e-6) * 0.01  # an explicit range: Plotly pads a lone bar by a whole unit
    out["xaxis"] = {"title": {"text": time_title}, "anchor": bottom, "zeroline": False, "range": [-pad, end + pad]}
    peak_x = axis.x(peak_ns)
    out["shapes"].append({"type": "line", "xref": "x", "yref": "paper", "x0": peak_x, "x1": peak_x, "y0": 0, "y1": 1,
                          "line": {"color": PEAK_COLOR, "width": 1, "dash": "dot"}})
    if axis.has_tail:
        last = axis.x(axis.last_ns)
        out["shapes"].append({"type": "rect", "xref": "x", "yref": "paper", "x0": end, "x1": last, "y0": 0, "y1": 1,
                              "fillcolor": "#9aa5b1", "opacity": 0.18, "line": {"width": 0}})
        out["xaxis"]["title"]["text"] += (f"<br>shaded at the right: release tail, {axis.tail_releases:,} release(s) "
                                          f"until {last:,.3f} {axis.unit} → (double-click to see it all)")
        out["margin"]["b"] = 150
    return out
