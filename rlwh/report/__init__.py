"""HTML reports of a run, rendered from SQL over the public views (`rlwh report`).

Imports run one way: queries (SQL text) <- context (page dataclasses, limits, escaping)
<- figures / memory (plotly JSON) <- run / index (pages) <- build (the entry point);
render holds file names, writes and templates. Nothing here imports rlwh.nightly: the
nightly job passes its state in.

What callers use today is re-exported here, imported on first use: `rlwh query` and
`rlwh summary` load rlwh.report.terminal alone, without jinja2, plotly and the pages
(~0.2 s).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlwh.report.build import build_report
    from rlwh.report.context import MAX_BARS, MAX_POINTS, MIB, Page, ReportSession, label, script_json
    from rlwh.report.index import write_index
    from rlwh.report.render import environment, render_page, slug, write_assets
    from rlwh.report.run import memory_page_name, render_run

# name -> the module of rlwh.report that defines it
_EXPORTS = {
    "build_report": "build", "MAX_BARS": "context", "MAX_POINTS": "context", "MIB": "context", "Page": "context",
    "ReportSession": "context", "label": "context", "script_json": "context", "write_index": "index",
    "environment": "render", "render_page": "render", "slug": "render", "write_assets": "render",
    "memory_page_name": "run", "render_run": "run",
}

__all__ = [
    "MAX_BARS", "MAX_POINTS", "MIB", "Page", "ReportSession", "build_report", "environment", "label",
    "memory_page_name", "render_page", "render_run", "script_json", "slug", "write_assets", "write_index",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
