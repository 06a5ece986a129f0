"""`rlwh report`: HTML pages of a run, rendered from SQL over the public views.

Layout of the output dir (run and role names come from the data and may be hostile, so
they become safe file names with `slug`, and nothing is written outside `out`):

  plotly.min.js, report.js       written once, shared by every page (works from file://)
  index.html                     every run of the warehouse
  <run>/index.html               run summary: roles x ranks, every source file, links
  <run>/role_timeline.html       Gantt of role spans, one row per (role, rank)
  <run>/memory_compare.html      peak and span per rank of each role, outliers marked
  <run>/gmm_heatmap.html         experts x layers per (step, role, rank), when gmm data exists
  <run>/memory_timeline/<role>-rank<k>.html   live memory of one rank

Python builds the figures (plain plotly JSON) and the templates only place them.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import fields
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from rlwh import __version__
from rlwh import report_queries as Q
from rlwh.assets import asset_dir
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.report_context import (  # noqa: F401  (re-exported: the limits and escaping helpers)
    MAX_BARS,
    MAX_POINTS,
    MIB,
    GmmHeatmapPage,
    IndexRow,
    Link,
    MemoryComparePage,
    MemoryTimelinePage,
    NightlyIndexPage,
    Page,
    RankRow,
    ReportSession,
    RoleTimelinePage,
    RunSummaryPage,
    SourceRow,
    label,
    now_text,
    num,
    query_text,
    script_json,
)
from rlwh.report_figures import compare_figures, gmm_heatmaps, role_timeline_figure
from rlwh.report_memory import memory_panels
from rlwh.warehouse import connect_read

# ---------------------------------------------------------------- files and templates

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RESERVED = {"index.html", "plotly.min.js", "report.js", "nightly.json", "memory_timeline"}  # our own files


def slug(name: str) -> str:
    """A safe file name for `name`; names that needed changing get a hash, so two never collide."""
    cleaned = _UNSAFE.sub("_", name).strip("._-")[:60]
    if cleaned == name and cleaned and cleaned.lower() not in _RESERVED:
        return cleaned
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned or 'x'}-{digest}"


def _inside(out: Path, path: Path) -> Path:
    resolved = path.resolve()
    if not resolved.is_relative_to(out.resolve()):
        raise RlwhError(f"refusing to write {path}: outside the report dir {out}")
    return resolved


def _write_text(out: Path, path: Path, text: str) -> Path:
    path = _inside(out, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_assets(out: Path) -> None:
    """plotly.min.js (from the installed plotly package) and report.js, once per dir."""
    from plotly.offline import get_plotlyjs

    for name, text in (("plotly.min.js", get_plotlyjs()), ("report.js", _template_dir().joinpath("report.js")
                                                                          .read_text(encoding="utf-8"))):
        target = out / name
        data = text.encode("utf-8")
        if not target.exists() or target.stat().st_size != len(data) or target.read_bytes() != data:
            _write_text(out, target, text)


def _template_dir() -> Path:
    return asset_dir("reports")


_ENV: Environment | None = None


def environment() -> Environment:
    global _ENV
    if _ENV is None:
        _ENV = Environment(
            loader=FileSystemLoader(str(_template_dir())),
            autoescape=select_autoescape(["html"], default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=lambda value: "" if value is None else value,  # NULL shows as an empty cell
        )
    return _ENV


def render_page(template: str, context: Page) -> str:
    """Render one page template with its context dataclass (its fields, shallowly)."""
    values = {f.name: getattr(context, f.name) for f in fields(context)}
    return environment().get_template(template).render(**values)


# ---------------------------------------------------------------- run summary


def _flags(r: dict) -> str:
    flags = []
    if r["is_memory_outlier"]:
        flags.append("memory outlier")
    if r["is_straggler"]:
        flags.append("straggler")
    return ", ".join(flags)


def memory_page_name(role: str, rank_id: int) -> str:
    return f"memory_timeline/{slug(role)}-rank{int(rank_id)}.html"


def _summary_page(s: ReportSession, run: dict, skew: list[dict], pages: list[Link], memory_pages: dict,
                  base: dict) -> RunSummaryPage:
    params = {"run": run["run"]}
    sources = s.rows(Q.RUN_SOURCES, params)
    ranks = [
        RankRow(
            role=r["role"], rank_id=r["rank_id"],
            peak_mb=num(None if r["peak_live_bytes"] is None else r["peak_live_bytes"] / MIB),
            peak_vs_median=num(r["peak_vs_median"], 2),
            span_ms=num(None if r["span_ns"] is None else r["span_ns"] / 1e6, 3),
            span_vs_median=num(r["span_vs_median"], 2), flags=_flags(r),
            memory_href=memory_pages.get((r["role"], r["rank_id"])),
        )
        for r in skew
    ]
    return RunSummaryPage(
        **base,
        run=run["run"], profile_dir=run["profile_dir"],
        first_ingested_at=str(run["first_ingested_at"])[:19], last_ingested_at=str(run["last_ingested_at"])[:19],
        failed_files=sum(1 for x in sources if x["status"] == "failed"),
        partial_files=sum(1 for x in sources if x["status"] == "partial"),
        pages=pages, ranks=ranks,
        sources=[SourceRow(x["status"], x["kind"], x["role"], x["rank_id"], x["path"], x["rows"],
                           num(x["seconds"], 3), x["message"]) for x in sources],
        queries=[query_text(Q.RUN_SOURCES, params), query_text(Q.RANK_SKEW, params)],
    )


# ---------------------------------------------------------------- run pages


def _base(title: str, page_dir: Path, out: Path, nav: list[tuple[str, Path]], charts: bool) -> dict:
    rel = lambda p: os.path.relpath(p, page_dir)  # noqa: E731
    return {
        "title": title, "generated_at": now_text(), "version": __version__,
        "nav": [Link(text, rel(target)) for text, target in nav],
        "plotly_src": rel(out / "plotly.min.js") if charts else None,
        "script_src": rel(out / "report.js") if charts else None,
    }


def render_run(s: ReportSession, run: dict, out: Path) -> list[Path]:
    """Every page of one run (a row of Q.RUNS) under out/<run slug>/; returns the pages."""
    name = run["run"]
    run_dir = out / slug(name)
    _inside(out, run_dir)
    crumbs = [("All runs", out / "index.html"), (f"Run {name}", run_dir / "index.html")]
    written: list[Path] = []
    skew = s.skew(name)
    links: list[Link] = []

    figure = role_timeline_figure(s, name)
    if figure is not None:
        page = RoleTimelinePage(**_base(f"Role timeline · {name}", run_dir, out, crumbs, True), run=name, figure=figure)
        written.append(_write_text(out, run_dir / "role_timeline.html", render_page("role_timeline.html", page)))
        links.append(Link("Role timeline (Gantt of role spans)", "role_timeline.html"))
    if skew:
        page = MemoryComparePage(**_base(f"Memory across ranks · {name}", run_dir, out, crumbs, True), run=name,
                                 figures=compare_figures(skew, name))
        written.append(_write_text(out, run_dir / "memory_compare.html", render_page("memory_compare.html", page)))
        links.append(Link("Memory and span across the ranks of each role", "memory_compare.html"))
    heatmaps, note = gmm_heatmaps(s, name)
    if heatmaps:
        page = GmmHeatmapPage(**_base(f"GMM expert load · {name}", run_dir, out, crumbs, True), run=name,
                              heatmaps=heatmaps, note=note)
        written.append(_write_text(out, run_dir / "gmm_heatmap.html", render_page("gmm_heatmap.html", page)))
        links.append(Link("GMM expert load heatmaps", "gmm_heatmap.html"))

    memory_pages: dict[tuple[str, int], str] = {}
    for r in skew:
        if r["peak_live_bytes"] is None:
            continue
        rel_name = memory_page_name(r["role"], r["rank_id"])
        path = run_dir / rel_name
        panels = memory_panels(s, name, r["role"], r["rank_id"])
        page = MemoryTimelinePage(
            **_base(f"Memory timeline · {r['role']} · rank {r['rank_id']}", path.parent, out, crumbs, True),
            run=name, role=r["role"], rank_id=r["rank_id"], panels=panels)
        written.append(_write_text(out, path, render_page("memory_timeline.html", page)))
        memory_pages[(r["role"], r["rank_id"])] = rel_name
        links.append(Link(f"Memory timeline: {r['role']} · rank {r['rank_id']}", rel_name))

    summary = _summary_page(s, run, skew, links, memory_pages,
                            _base(f"Run {name}", run_dir, out, crumbs[:1], False))
    written.insert(0, _write_text(out, run_dir / "index.html", render_page("index.html", summary)))
    _remove_stale(run_dir, written)
    return written


def _remove_stale(run_dir: Path, written: list[Path]) -> None:
    """Pages of an earlier render that this one did not write (a rank or gmm data gone)."""
    keep = {p.resolve() for p in written}
    for path in [*run_dir.glob("*.html"), *run_dir.glob("memory_timeline/*.html")]:
        if path.resolve() not in keep:
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------- runs index


def write_index(s: ReportSession, index: Path, reports: Path, state: dict | None = None) -> Path:
    """The page listing every run, newest first, with what `rlwh nightly` last found.

    `state` is rlwh.nightly's state file: {"runs": {run: {"status", "baseline",
    "regressions": [text], "checked"}}, "last_nightly": {"regressions_found", ...}}.
    """
    state = state or {}
    per_run = state.get("runs", {})
    counts = {r["run"]: r for r in s.rows(Q.SOURCE_COUNTS)}
    rows = []
    for r in s.rows(Q.RUNS):
        name = r["run"]
        page = reports / slug(name) / "index.html"
        known = per_run.get(name, {})
        c = counts.get(name, {"files": 0, "failed": 0, "partial": 0})
        rows.append(IndexRow(
            run=name, href=os.path.relpath(page, index.parent) if page.exists() else None,
            first_ingested_at=str(r["first_ingested_at"])[:19], files=c["files"], failed=c["failed"],
            partial=c["partial"], status=str(known.get("status", "")), baseline=str(known.get("baseline") or ""),
            checked=str(known.get("checked", "not checked")),
            regressions=[str(g) for g in known.get("regressions", [])],
        ))
    last = state.get("last_nightly") or {}
    page = NightlyIndexPage(
        **_base("rlwh runs", index.parent, index.parent, [("All runs", index)], False),
        runs=rows, checked=bool(last), regressions_found=int(last.get("regressions_found", 0)),
        ingest_failures=int(last.get("ingest_failures", 0)),
        failures=[str(f) for f in last.get("failures", [])],
        rule=str(last.get("rule", "Regressions are checked by `rlwh nightly`.")),
    )
    index.parent.mkdir(parents=True, exist_ok=True)
    return _write_text(index.parent, index, render_page("nightly_index.html", page))


# ---------------------------------------------------------------- entry point


def build_report(config: Config, out: Path | None = None, run: str | None = None) -> list[Path]:
    """Render the pages of `run` (every run when None) into `out`; returns the pages written."""
    out = Path(out or config.reports_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = connect_read(config)
    try:
        s = ReportSession(con)
        runs = s.rows(Q.RUNS)
        if run is not None:
            runs = [r for r in runs if r["run"] == run]
            if not runs:
                raise RlwhError(f"no run named {run!r} in {config.db_path}: see `rlwh runs`")
        write_assets(out)
        written: list[Path] = []
        for r in runs:
            written.extend(render_run(s, r, out))
        from rlwh.nightly import load_state

        written.append(write_index(s, out / "index.html", out, load_state(out / "index.html")))
        return written
    finally:
        con.close()
