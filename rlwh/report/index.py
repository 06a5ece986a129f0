"""The page listing every run of the warehouse, newest first.

`rlwh nightly` hands in what it found (its state, rlwh.report.nightly_state); this module never
imports nightly, so the dependency runs one way: nightly -> report.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlwh.report import queries as Q
from rlwh.report import render
from rlwh.report.context import IndexRow, Link, NightlyIndexPage, ReportSession


def _existing(href, index: Path) -> str | None:
    """A link from nightly.json, kept only while its page is still there."""
    return href if isinstance(href, str) and (index.parent / href).is_file() else None


def write_index(s: ReportSession, index: Path, reports: Path, state: dict | None = None) -> Path:
    """Write the runs index at `index`, linking the run pages under `reports`.

    `state` is nightly.json: {"runs": {run: {"status", "baseline", "regressions": [text],
    "checked"}}, "last_nightly": {"regressions_found", ...}}; without it the page only lists
    the runs and says regressions were not checked.
    """
    state = state or {}
    per_run = state.get("runs", {})
    counts = {r["run"]: r for r in s.rows(Q.SOURCE_COUNTS)}
    rows = []
    for r in s.rows(Q.RUNS):
        name = r["run"]
        page = reports / render.slug(name) / "index.html"
        known = per_run.get(name, {})
        c = counts.get(name, {"files": 0, "failed": 0, "partial": 0})
        rows.append(IndexRow(
            run=name, href=os.path.relpath(page, index.parent) if page.exists() else None,
            first_ingested_at=str(r["first_ingested_at"])[:19], files=c["files"], failed=c["failed"],
            partial=c["partial"], status=str(known.get("status", "")), baseline=str(known.get("baseline") or ""),
            checked=str(known.get("checked", "not checked")),
            regressions=[str(g) for g in known.get("regressions", [])],
            compare_href=_existing(known.get("compare_page"), index),
            regression_links=[Link(str(g.get("text")), _existing(g.get("memory_page"), index))
                              for g in known.get("regression_links", []) if isinstance(g, dict)],
        ))
    last = state.get("last_nightly") or {}
    index_page = NightlyIndexPage(
        **render.page_base("rlwh runs", index.parent, index.parent, [("All runs", index)], False),
        runs=rows, checked=bool(last), regressions_found=int(last.get("regressions_found", 0)),
        ingest_failures=int(last.get("ingest_failures", 0)),
        failures=[str(f) for f in last.get("failures", [])],
        rule=str(last.get("rule", "Regressions are checked by `rlwh nightly`.")),
    )
    index.parent.mkdir(parents=True, exist_ok=True)
    return render.write_text(index.parent, index, render.render_page("nightly_index.html", index_page))
