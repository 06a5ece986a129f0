"""What report pages are made of: the context dataclass of each page (its fields carry
`help` metadata, checked by tests/test_report.py against the templates), the limits that
keep pages small, and the helpers that turn query rows into safe figure values.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

import duckdb
from markupsafe import Markup

from rlwh.errors import RlwhError
from rlwh.report import queries as Q

BUCKETS = 2000  # time buckets of a memory line: at most 2 points (min, max) per bucket
MAX_POINTS = 2 * BUCKETS  # fewer events than this are drawn unreduced
MAX_BARS = 2000  # allocation bars per panel: the largest of each bucket above this
HOVER_BUDGET = 20_000_000  # (block, point) pairs the live-block lists may cost
MAX_SPANS = 20_000  # role timeline bars; the longest are kept
MAX_PHASES = 5_000  # phase ranges drawn on the role timeline; the longest are kept
MAX_HEATMAPS = 48  # GMM heatmaps on one page
MIB = 1048576


def _help(text: str, **kwargs):
    return field(metadata={"help": text}, **kwargs)


# ---------------------------------------------------------------- page contexts


@dataclass
class Link:
    label: str
    href: str | None  # None: the page is gone, so the label shows without a link


@dataclass
class QueryText:
    sql: str
    params: str


@dataclass
class Figure:
    id: str
    title: str
    note: str
    data: Markup
    queries: list[QueryText]


@dataclass(kw_only=True)
class Page:
    """Fields every page has; base.html and _nav.html use them."""

    title: str = _help("Page heading and window title.")
    generated_at: str = _help("When the page was rendered, UTC.")
    version: str = _help("rlwh version that rendered the page.")
    nav: list[Link] = _help("Breadcrumb links: the runs index, then the run summary.")
    plotly_src: str | None = _help("Relative URL of plotly.min.js; None on pages without charts.")
    script_src: str | None = _help("Relative URL of report.js, which draws the charts.")


@dataclass
class RankRow:
    role: str
    rank_id: int
    peak_mb: str
    peak_vs_median: str
    span_ms: str
    span_vs_median: str
    flags: str
    memory_href: str | None


@dataclass
class SourceRow:
    status: str
    kind: str
    role: str | None
    rank_id: int | None
    path: str
    rows: int
    seconds: str
    message: str | None


@dataclass
class NoStacksRow:
    """A capture whose trace holds no call stack, and how to record them."""

    role: str | None
    rank_id: int | None
    capture: str
    ops: int
    record_stacks_with: str


@dataclass
class SourceGroup:
    """Source files of one (status, kind), folded on the page: a run has hundreds."""

    status: str
    kind: str
    rows: int
    files: list[SourceRow]


@dataclass(kw_only=True)
class RunSummaryPage(Page):
    run: str = _help("Run name.")
    profile_dir: str = _help("Profile dir the run was ingested from (runs.profile_dir).")
    first_ingested_at: str = _help("When the run was first ingested, UTC.")
    last_ingested_at: str = _help("When a file of the run was last loaded, UTC.")
    failed_files: int = _help("Source files with status failed.")
    partial_files: int = _help("Source files with status partial.")
    pages: list[Link] = _help("Links to every other page of the run.")
    ranks: list[RankRow] = _help("One row per (role, rank) from rank_skew: peak, span, flags, memory page.")
    sources: list[SourceRow] = _help("Every source file of the run, failed and partial first, paths in natural order.")
    problems: list[SourceRow] = _help("The failed and partial source files, shown unfolded.")
    source_groups: list[SourceGroup] = _help("The other source files by (status, kind), each folded.")
    no_stacks: list[NoStacksRow] = _help("The captures whose ops carry no call stack (profiled without with_stack), "
                                         "and how to record them.")
    queries: list[QueryText] = _help("The SQL behind the tables, with parameters.")


@dataclass
class MemoryPanel:
    id: str
    title: str
    note: str
    reduced: str | None
    data: Markup
    queries: list[QueryText]
    no_stacks: str | None = None  # the capture holds no call stacks: how to record them


@dataclass(kw_only=True)
class MemoryTimelinePage(Page):
    run: str = _help("Run name.")
    role: str = _help("Role of the rank.")
    rank_id: int = _help("Global rank.")
    panels: list[MemoryPanel] = _help(
        "One chart per (capture, device) of the rank: figure and inspector data, reduction note, SQL."
    )


@dataclass
class Cell:
    text: str
    ns: int | None = None  # the view's exact figure a ms cell shows (its data-ns)
    shares: list[tuple[str, float]] | None = None  # (part, % of the window): a stacked bar in the cell


@dataclass
class Table:
    id: str
    title: str
    note: str
    view: str  # the public views its figures come from, named on the page
    columns: list[tuple[str, str]]  # (name: the view's column or the table's own, heading)
    rows: list[list[Cell]]
    queries: list[QueryText]
    legend: list[tuple[str, str]] = field(default_factory=list)  # (part, words) of the cells' stacked bars


@dataclass
class RoleSection:
    role: str
    figure: Figure | None  # None: a role with device tables and no span to draw
    tables: list[Table]


@dataclass(kw_only=True)
class RoleTimelinePage(Page):
    run: str = _help("Run name.")
    sections: list[RoleSection] = _help(
        "One Gantt chart of role_timeline spans per (clock, role), epoch first, each rank's phase ranges and device "
        "lanes under its spans; under a role's first chart its tables: device time per phase (phase_device_time), "
        "clocks across ranks (clock_offsets), device time and why it idled (device_time, device_idle).")


@dataclass(kw_only=True)
class CollectivesPage(Page):
    run: str = _help("Run name.")
    role: str = _help("The role the page is about.")
    figures: list[Figure] = _help("Each rank's lateness and wait at every collective of the role (collectives).")
    stragglers: list[dict] = _help("Rows of the stragglers view: per step, the rank the others waited for.")
    clocks: list[dict] = _help("Rows of clock_offsets for the role: each rank's clock against the reference rank.")
    capped: int = _help("Waits capped at their collective's duration (collectives.wait_capped) in the role.")
    links: list[dict] = _help("Rows of slowest_links for the role: each step's slowest links between ranks, with "
                              "their figures as text (size_mb, duration_ms, gbps, median_gbps, of_median, peer); "
                              "empty where no communication matrix was loaded.")
    rates: list[dict] = _help("Rows of the slowest collective instances by bandwidth (collective_bandwidth) for the "
                              "role, figures as text (mb, stay_ms, algbw, transfer); empty where no collective "
                              "records its size.")
    queries: list[QueryText] = _help("The SQL behind the straggler, clock, bandwidth and link tables.")


@dataclass(kw_only=True)
class TrainMetricsPage(Page):
    run: str = _help("Run name.")
    metrics: list[str] = _help("The chosen log metrics ([verl_log] regression_metrics), in config order.")
    profiled_steps: list[int] = _help("Steps the profile captured (step_metrics.is_profiled), marked on every chart.")
    figures: list[Figure] = _help("One chart per chosen metric the run's logs hold: value over step, one line per log.")


@dataclass
class ImbalanceRow:
    layer: int
    experts: int
    total_tokens: int
    max_tokens: int
    max_mean_ratio: str
    cv: str
    hottest_expert: int | None
    flagged: bool


@dataclass
class Heatmap:
    figure: Figure
    imbalance: list[ImbalanceRow]


@dataclass(kw_only=True)
class GmmHeatmapPage(Page):
    run: str = _help("Run name.")
    heatmaps: list[Heatmap] = _help("One heatmap per (step, role, rank) with its per-layer imbalance rows.")
    note: str | None = _help("Says when heatmaps were left out (more than MAX_HEATMAPS).")


@dataclass(kw_only=True)
class MemoryComparePage(Page):
    run: str = _help("Run name.")
    figures: list[Figure] = _help("One figure per role: peak per rank and span per rank, outliers marked.")


@dataclass
class IndexRow:
    run: str
    href: str | None
    first_ingested_at: str
    files: int
    failed: int
    partial: int
    status: str
    baseline: str
    checked: str
    regressions: list[str]
    compare_href: str | None = None  # the run-against-baseline page (rlwh.report.run_compare)
    regression_links: list[Link] = field(default_factory=list)  # regression text -> the rank's memory page


@dataclass(kw_only=True)
class NightlyIndexPage(Page):
    runs: list[IndexRow] = _help("Every run of the warehouse, newest first, with its regressions.")
    checked: bool = _help("True when this page comes from `rlwh nightly` (regressions were checked).")
    regressions_found: int = _help("Regressions found in the runs processed by this nightly.")
    ingest_failures: int = _help("Run dirs of this nightly whose ingest failed in whole or part.")
    failures: list[str] = _help("What failed to ingest in the last nightly, one line per run dir.")
    rule: str = _help("The regression rule and its thresholds, in words.")


# ---------------------------------------------------------------- escaping

_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def script_json(value) -> Markup:
    """JSON safe inside <script>: no "</script>", "<!--" or line separators can appear."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Markup(text.translate(_SCRIPT_ESCAPES))


def label(text) -> str:
    """Data text for a Plotly label: Plotly reads labels as pseudo-HTML, so escape it."""
    return html.escape("" if text is None else str(text), quote=False)


# ---------------------------------------------------------------- formatting helpers


def now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def utc_text(ns: int) -> str:
    moment = datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{ns % 1_000_000_000:09d}"


def num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def ms(ns: int, t0: int) -> float:
    return round((ns - t0) / 1e6, 6)


def mib(value) -> float:
    return round(int(value) / MIB, 3)


def params_text(params: dict) -> str:
    def show(value) -> str:
        if isinstance(value, list) and len(value) > 6:
            return f"[{', '.join(map(repr, value[:3]))}, ... {len(value):,} values]"
        return repr(value)

    return ", ".join(f"${k} = {show(v)}" for k, v in params.items())


class ReportSession:
    """One read connection for a whole render; remembers rank_skew per run (an expensive view)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, usage_component: str | None = None):
        self.con = con
        # memory_usage's component the memory page draws first ([reports] in warehouse.toml).
        self.usage_component = usage_component
        self._skew: dict[str, list[dict]] = {}

    def skew(self, run: str) -> list[dict]:
        if run not in self._skew:
            self._skew[run] = self.rows(Q.RANK_SKEW, {"run": run})
        return self._skew[run]

    def rows(self, sql: str, params: dict | None = None) -> list[dict]:
        # A list goes as its text ('[1, 2]', cast in the SQL): DuckDB binds a Python list
        # element by element, ~0.2 ms each without numpy.
        bound = {k: json.dumps(v) if isinstance(v, list) else v for k, v in (params or {}).items()}
        try:
            cursor = self.con.execute(sql, bound)
        except duckdb.Error as exc:
            raise RlwhError(f"report query failed: {exc}") from exc
        if cursor.description is None:
            return []
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def query_text(sql: str, params: dict) -> QueryText:
    """A query as a page shows it: the SQL and its parameter values."""
    return QueryText(sql.strip(), params_text(params))


