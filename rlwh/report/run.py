"""Every page of one run: summary, role timeline, memory across ranks, GMM heatmaps and
one memory timeline per (role, rank), under out/<run slug>/.

  <run>/index.html               run summary: roles x ranks, every source file, links
  <run>/role_timeline.html       Gantt of role spans per role (its own axis), device lanes under each rank
  <run>/memory_compare.html      peak and span per rank of each role, outliers marked
  <run>/gmm_heatmap.html         experts x layers per (step, role, rank), when gmm data exists
  <run>/train_metrics.html       VeRL log metrics over steps, profiled steps marked, when a log exists
  <run>/memory_timeline/<role>-rank<k>.html   live memory of one rank
  <run>/collectives/<role>.html  each rank's lateness and wait per collective, when device data exists
"""

from __future__ import annotations

import re
from pathlib import Path

from rlwh.config import DEFAULT_TRAIN_METRICS
from rlwh.report import queries as Q
from rlwh.report import render
from rlwh.report.collectives import collectives_pages
from rlwh.report.compare import compare_figures
from rlwh.report.context import (
    MIB,
    CollectivesPage,
    GmmHeatmapPage,
    Link,
    MemoryComparePage,
    MemoryTimelinePage,
    NoStacksRow,
    Page,
    RankRow,
    ReportSession,
    RoleTimelinePage,
    RunSummaryPage,
    SourceGroup,
    SourceRow,
    TrainMetricsPage,
    num,
    query_text,
)
from rlwh.report.gmm import gmm_heatmaps
from rlwh.report.memory import memory_panels
from rlwh.report.role_tables import role_sections
from rlwh.report.train_metrics import train_metric_figures
from rlwh.stacks import record_stacks_params


def memory_page_name(role: str, rank_id: int) -> str:
    """The memory timeline page of (role, rank), relative to the run dir."""
    return f"memory_timeline/{render.slug(role)}-rank{int(rank_id)}.html"


def _flags(r: dict) -> str:
    flags = []
    if r["is_memory_outlier"]:
        flags.append("memory outlier")
    if r["is_straggler"]:
        flags.append("straggler")
    return ", ".join(flags)


_DIGITS = re.compile(r"(\d+)")
_STATUS_ORDER = {"failed": 0, "partial": 1, "ok": 2}


def natural_key(text: str | None) -> tuple:
    """Sort key that reads digit runs as numbers: matmul.2 before matmul.10."""
    parts = _DIGITS.split(text or "")
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


def _source_rows(sources: list[dict]) -> tuple[list[SourceRow], list[SourceRow], list[SourceGroup]]:
    """All rows (problems first), the problems, and the rest folded by (status, kind)."""
    ordered = sorted(sources, key=lambda x: (_STATUS_ORDER.get(x["status"], 3), natural_key(x["path"])))
    rows = [SourceRow(x["status"], x["kind"], x["role"], x["rank_id"], x["path"], x["rows"], num(x["seconds"], 3),
                      x["message"]) for x in ordered]
    problems = [r for r in rows if r.status in ("failed", "partial")]
    groups: dict[tuple[str, str], SourceGroup] = {}
    for r in rows:
        if r.status not in ("failed", "partial"):
            group = groups.setdefault((r.status, r.kind), SourceGroup(r.status, r.kind, 0, []))
            group.files.append(r)
            group.rows += r.rows or 0
    folded = sorted(groups.values(), key=lambda g: (_STATUS_ORDER.get(g.status, 3), g.kind))
    return rows, problems, folded


def _summary_page(s: ReportSession, run: dict, skew: list[dict], pages: list[Link], memory_pages: dict,
                  base: dict) -> RunSummaryPage:
    params = {"run": run["run"]}
    sources = s.rows(Q.RUN_SOURCES, params)
    rows, problems, groups = _source_rows(sources)
    stack_params = {**params, **record_stacks_params()}
    no_stacks = [NoStacksRow(r["role"], r["rank_id"], r["capture"], r["ops"], r["record_stacks_with"])
                 for r in s.rows(Q.NO_STACK_CAPTURES, stack_params)]
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
        sources=rows, problems=problems, source_groups=groups, no_stacks=no_stacks,
        queries=[query_text(Q.RUN_SOURCES, params), query_text(Q.RANK_SKEW, params),
                 query_text(Q.NO_STACK_CAPTURES, stack_params)],
    )


def _write(out: Path, path: Path, template: str, page) -> Path:
    return render.write_text(out, path, render.render_page(template, page))


def render_run(s: ReportSession, run: dict, out: Path,
               train_metrics: tuple[str, ...] = DEFAULT_TRAIN_METRICS) -> list[Path]:
    """Every page of one run (a row of Q.RUNS) under out/<run slug>/; returns the pages.

    train_metrics: the VeRL log metrics the training-log page draws ([verl_log] regression_metrics)."""
    name = run["run"]
    run_dir = out / render.slug(name)
    render.inside(out, run_dir)
    crumbs = [("All runs", out / "index.html"), (f"Run {name}", run_dir / "index.html")]
    base = lambda title, page_dir=run_dir: render.page_base(title, page_dir, out, crumbs, True)  # noqa: E731
    written: list[Path] = []
    skew = s.skew(name)
    links: list[Link] = []

    sections = role_sections(s, name)
    if sections:
        page: Page = RoleTimelinePage(**base(f"Role timeline · {name}"), run=name, sections=sections)
        written.append(_write(out, run_dir / "role_timeline.html", "role_timeline.html", page))
        links.append(Link("Role timeline (Gantt of role spans)", "role_timeline.html"))
    for page_facts in collectives_pages(s, name):
        role = page_facts["role"]
        path = run_dir / "collectives" / f"{render.slug(role)}.html"
        page = CollectivesPage(**base(f"Collectives · {role} · {name}", path.parent), run=name, role=role,
                               figures=[page_facts["figure"]], stragglers=page_facts["stragglers"],
                               clocks=page_facts["clocks"], capped=page_facts["capped"],
                               links=page_facts["links"], rates=page_facts["rates"],
                               queries=page_facts["queries"])
        written.append(_write(out, path, "collectives.html", page))
        links.append(Link(f"Collectives: who waits for whom · {role}", f"collectives/{render.slug(role)}.html"))
    compare = compare_figures(skew, name)
    if compare:
        page = MemoryComparePage(**base(f"Memory across ranks · {name}"), run=name, figures=compare)
        written.append(_write(out, run_dir / "memory_compare.html", "memory_compare.html", page))
        links.append(Link("Memory and span across the ranks of each role", "memory_compare.html"))
    charts, profiled = train_metric_figures(s, name, train_metrics)
    if charts:
        page = TrainMetricsPage(**base(f"Training log · {name}"), run=name, metrics=list(train_metrics),
                                profiled_steps=profiled, figures=charts)
        written.append(_write(out, run_dir / "train_metrics.html", "train_metrics.html", page))
        links.append(Link("Training log metrics over steps, profiled steps marked", "train_metrics.html"))
    heatmaps, note = gmm_heatmaps(s, name)
    if heatmaps:
        page = GmmHeatmapPage(**base(f"GMM expert load · {name}"), run=name, heatmaps=heatmaps, note=note)
        written.append(_write(out, run_dir / "gmm_heatmap.html", "gmm_heatmap.html", page))
        links.append(Link("GMM expert load heatmaps", "gmm_heatmap.html"))

    memory_pages: dict[tuple[str, int], str] = {}
    for r in skew:
        if r["peak_live_bytes"] is None:
            continue
        rel_name = memory_page_name(r["role"], r["rank_id"])
        path = run_dir / rel_name
        page = MemoryTimelinePage(
            **base(f"Memory timeline · {r['role']} · rank {r['rank_id']}", path.parent),
            run=name, role=r["role"], rank_id=r["rank_id"], panels=memory_panels(s, name, r["role"], r["rank_id"]))
        written.append(_write(out, path, "memory_timeline.html", page))
        memory_pages[(r["role"], r["rank_id"])] = rel_name
        links.append(Link(f"Memory timeline: {r['role']} · rank {r['rank_id']}", rel_name))

    summary = _summary_page(s, run, skew, links, memory_pages,
                            render.page_base(f"Run {name}", run_dir, out, crumbs[:1], False))
    written.insert(0, _write(out, run_dir / "index.html", "index.html", summary))
    _remove_stale(run_dir, written)
    return written


def _remove_stale(run_dir: Path, written: list[Path]) -> None:
    """Pages of an earlier render that this one did not write (a rank or gmm data gone)."""
    keep = {p.resolve() for p in written}
    for path in [*run_dir.glob("*.html"), *run_dir.glob("memory_timeline/*.html"), *run_dir.glob("collectives/*.html")]:
        if path.resolve() not in keep:
            path.unlink(missing_ok=True)
