"""HTML reports of a run, rendered from SQL over the public views (`rlwh report`).

Imports run one way: queries (SQL text) <- context (page dataclasses, limits, escaping)
<- figures / memory (plotly JSON) <- run / index (pages) <- build (the entry point);
render holds file names, writes and templates. Nothing here imports rlwh.nightly: the
nightly job passes its state in.

What callers use today is re-exported here.
"""

from rlwh.report.build import build_report
from rlwh.report.context import MAX_BARS, MAX_POINTS, MIB, Page, ReportSession, label, script_json
from rlwh.report.index import write_index
from rlwh.report.render import environment, render_page, slug, write_assets
from rlwh.report.run import memory_page_name, render_run

__all__ = [
    "MAX_BARS", "MAX_POINTS", "MIB", "Page", "ReportSession", "build_report", "environment", "label",
    "memory_page_name", "render_page", "render_run", "script_json", "slug", "write_assets", "write_index",
]
