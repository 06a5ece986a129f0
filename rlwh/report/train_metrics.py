"""The training-log page of a run: chosen VeRL log metrics over steps, profiled steps marked.

One chart per metric of [verl_log] regression_metrics that the run's logs hold: one line
per log (a resumed run is several logs that repeat steps, drawn apart), on a step axis
where every step the profile captured (step_metrics.is_profiled) is a dotted vertical
line, so "did the profiled step look like the others" is read off one chart. NaN and inf
values are left out of the lines (JSON has no such numbers) and counted in the note.
"""

from __future__ import annotations

import math

from rlwh.report.context import Figure, ReportSession, label, query_text, script_json

# The chosen metrics come as one text, joined by newlines: a bound list would go element by element.
TRAIN_SERIES = """
select capture, step, metric, value, line
from train_metrics
where run = $run and list_contains(string_split($metrics, chr(10)), metric)
order by metric, capture, step, line
"""

PROFILED_STEPS = """
select step, profile_captures, profile_window_s, timing_step_s
from step_metrics
where run = $run and is_profiled
order by step
"""

LOG_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def _figure(index: int, metric: str, rows: list[dict], profiled: list[dict], params: dict) -> Figure:
    traces, dropped = [], 0
    logs = sorted({r["capture"] for r in rows})
    for k, capture in enumerate(logs):
        mine = [r for r in rows if r["capture"] == capture]
        finite = [r for r in mine if r["value"] is not None and math.isfinite(r["value"])]
        dropped += len(mine) - len(finite)
        traces.append({
            "type": "scatter", "mode": "lines+markers", "name": label(capture),
            "x": [r["step"] for r in finite], "y": [r["value"] for r in finite],
            "hovertext": [f"{label(capture)}<br>step {r['step']} (line {r['line']})<br>"
                          f"{label(metric)} = {r['value']:.6g}" for r in finite],
            "hoverinfo": "text", "marker": {"size": 4, "color": LOG_COLORS[k % len(LOG_COLORS)]},
        })
    steps = [p["step"] for p in profiled]
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": s, "x1": s, "y0": 0, "y1": 1,
               "line": {"dash": "dot", "width": 1.5, "color": "#d62728"}} for s in steps]
    if steps:  # a legend entry and hover for the marks: markers along the top edge
        traces.append({
            "type": "scatter", "mode": "markers", "name": "profiled step", "x": steps, "y": [1.0] * len(steps),
            "yaxis": "y2", "marker": {"symbol": "triangle-down", "size": 10, "color": "#d62728"},
            "hovertext": [f"step {p['step']} profiled: {p['profile_captures']} capture(s)"
                          + (f", window {p['profile_window_s']:.3f} s" if p["profile_window_s"] is not None else "")
                          + (f", log timing_s/step {p['timing_step_s']:.3f} s" if p["timing_step_s"] is not None
                             else "") for p in profiled],
            "hoverinfo": "text",
        })
    layout = {
        "height": 320, "margin": {"l": 70, "r": 20, "t": 10, "b": 50}, "shapes": shapes,
        "xaxis": {"title": {"text": "step"}, "type": "linear", "zeroline": False},
        "yaxis": {"title": {"text": label(metric)}},
        "yaxis2": {"overlaying": "y", "range": [0, 1.05], "visible": False, "fixedrange": True},
        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom"}, "showlegend": True,
    }
    note = f"{len(rows):,} values from {len(logs)} log(s); {len(steps)} profiled step(s) marked with dotted lines."
    if dropped:
        note += f" {dropped} NaN or infinite value(s) not drawn."
    return Figure(f"train-metric-{index}", metric, note, script_json({"data": traces, "layout": layout}),
                  [query_text(TRAIN_SERIES, params), query_text(PROFILED_STEPS, {"run": params["run"]})])


def train_metric_figures(s: ReportSession, run: str, metrics: tuple[str, ...]) -> tuple[list[Figure], list[int]]:
    """(one chart per chosen metric the run's logs hold, the profiled steps); ([], ...) with no log."""
    params = {"run": run, "metrics": "\n".join(metrics)}
    rows = s.rows(TRAIN_SERIES, params)
    if not rows:
        return [], []
    profiled = s.rows(PROFILED_STEPS, {"run": run})
    figures: list[Figure] = []
    for metric in metrics:
        mine = [r for r in rows if r["metric"] == metric]
        if mine:
            figures.append(_figure(len(figures), metric, mine, profiled, params))
    return figures, [p["step"] for p in profiled]
