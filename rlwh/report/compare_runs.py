"""`rlwh compare RUN_A RUN_B`: two runs side by side, per (role, rank): peak live memory
and time in the role, with the change in percent and the regressions by nightly's rule.

The regression rule lives here (nightly imports it), so an on-demand comparison and the
nightly index can never disagree about what counts as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.warehouse.catalog import QueryResult, Reader, reading


@dataclass(frozen=True)
class RankMetrics:
    """What a run is compared on, per (role, rank): from rank_skew."""

    peak_live_bytes: int | None
    span_ns: int | None


@dataclass(frozen=True)
class Regression:
    role: str
    rank_id: int
    metric: str  # peak_live_bytes | span_ns
    baseline: int
    value: int
    change_pct: float
    threshold_pct: float

    def __str__(self) -> str:
        def unit(v: int) -> str:
            return f"{v / 1048576:,.1f} MiB" if self.metric == "peak_live_bytes" else f"{v / 1e6:,.3f} ms"

        return (f"{self.role} rank {self.rank_id}: {self.metric} {unit(self.baseline)} -> {unit(self.value)} "
                f"(+{self.change_pct:.1f}%, threshold {self.threshold_pct:g}%)")


def find_regressions(current: dict[tuple[str, int], RankMetrics], baseline: dict[tuple[str, int], RankMetrics],
                     peak_memory_pct: float, role_span_pct: float) -> list[Regression]:
    """The regression rule.

    A (role, rank) of the current run regresses when its peak live memory
    (rank_skew.peak_live_bytes) is more than peak_memory_pct percent above the same
    (role, rank) of the baseline run, or its role span (rank_skew.span_ns: earliest start
    to latest end of its spans in the role) more than role_span_pct percent above it.
    Pairs missing on either side, or with a NULL or zero baseline, are not compared.
    """
    found = []
    for key in sorted(current, key=lambda k: (k[0], k[1])):
        before = baseline.get(key)
        if before is None:
            continue
        for metric, pct in (("peak_live_bytes", peak_memory_pct), ("span_ns", role_span_pct)):
            old, new = getattr(before, metric), getattr(current[key], metric)
            if old is None or new is None or old <= 0:
                continue
            change = (new - old) / old * 100.0
            if change > pct:
                found.append(Regression(key[0], key[1], metric, int(old), int(new), change, pct))
    return found


def rule_text(config: Config, against: str) -> str:
    """The regression rule in words, for pages: `against` names the baseline."""
    return (f"A (role, rank) regresses when its peak live memory rises more than {config.peak_memory_pct:g}% "
            f"or its role span more than {config.role_span_pct:g}% above the baseline; "
            + train_rule_text(config) + f": {against}")


@dataclass(frozen=True)
class TrainRegression:
    """A training-log metric whose median over the run's steps moved the wrong way."""

    metric: str
    baseline: float
    value: float
    change_pct: float  # signed change from baseline to value
    threshold_pct: float
    higher_is_better: bool
    role = "training log"  # where nightly's links look for a rank: none here
    rank_id = None

    def __str__(self) -> str:
        better = "higher" if self.higher_is_better else "lower"
        return (f"training log: {self.metric} median {self.baseline:.6g} -> {self.value:.6g} "
                f"({self.change_pct:+.1f}%, {better} is better, threshold {self.threshold_pct:g}%)")


# Per metric of a run's VeRL logs: the median over its step records (NaN and inf left out,
# so one diverged step does not move it), and how many records held it.
TRAIN_FIGURES = """
select metric, median(value) as median_value, count(*) as records
from train_metrics
where run = $run and isfinite(value)
group by metric
order by metric
"""


def train_rule_text(config: Config) -> str:
    """The training-log half of the rule, in words."""
    return (f"a training log's median of {', '.join(config.train_metrics)} regresses when it moves the wrong way "
            f"(down for {', '.join(config.higher_is_better) or 'none'}, else up) by more than "
            f"{config.train_metric_pct:g}%")


def train_figures(rows: list[dict], metrics: tuple[str, ...]) -> dict[str, float]:
    """TRAIN_FIGURES rows -> {metric: median} for the chosen metrics."""
    return {r["metric"]: float(r["median_value"]) for r in rows if r["metric"] in metrics}


def find_train_regressions(current: dict[str, float], baseline: dict[str, float],
                           config: Config) -> list[TrainRegression]:
    """The training-log rule: a chosen metric ([verl_log] regression_metrics) whose median
    over the run's records moved more than [thresholds] train_metric_pct percent the wrong
    way from the baseline's: down for a metric in [verl_log] higher_is_better, else up.
    A metric missing on either side, or with a zero baseline, is not compared."""
    found = []
    for metric in config.train_metrics:
        old, new = baseline.get(metric), current.get(metric)
        if old is None or new is None or old == 0:
            continue
        change = (new - old) / abs(old) * 100.0
        higher = metric in config.higher_is_better
        if (-change if higher else change) > config.train_metric_pct:
            found.append(TrainRegression(metric, old, new, change, config.train_metric_pct, higher))
    return found


SIDE_BY_SIDE = """
with a as (select role, rank_id, peak_live_bytes, span_ns from rank_skew where run = $a),
     b as (select role, rank_id, peak_live_bytes, span_ns from rank_skew where run = $b)
select
  role, rank_id,
  round(a.peak_live_bytes / 1048576, 1) as a_peak_mib,
  round(b.peak_live_bytes / 1048576, 1) as b_peak_mib,
  round(100.0 * (b.peak_live_bytes - a.peak_live_bytes) / nullif(a.peak_live_bytes, 0), 1) as peak_change_pct,
  round(a.span_ns / 1e6, 3) as a_time_in_role_ms,
  round(b.span_ns / 1e6, 3) as b_time_in_role_ms,
  round(100.0 * (b.span_ns - a.span_ns) / nullif(a.span_ns, 0), 1) as time_change_pct,
  a.peak_live_bytes as a_peak_bytes, b.peak_live_bytes as b_peak_bytes, a.span_ns as a_span_ns, b.span_ns as b_span_ns
from a full join b using (role, rank_id)
order by role, rank_id
"""


# The call stacks whose live bytes at a rank's peak grew most from run A to run B: per
# (role, rank, stack), memory_peak_breakdown's live bytes at each run's own peak, the stack
# named by its first user frame (else its top frame, else the op).
STACKS_GREW = """
with live as (
  select run, role, rank_id, coalesce(user_frame, call_stack_top, name) as stack, sum(live_bytes) as live_bytes
  from memory_peak_breakdown
  anti join internal.left_out_captures using (run, capture)
  where run in ($a, $b)
  group by all
),
a as (select * from live where run = $a),
b as (select * from live where run = $b)
select role, rank_id, stack, coalesce(a.live_bytes, 0)::bigint as a_live_bytes,
  coalesce(b.live_bytes, 0)::bigint as b_live_bytes,
  (coalesce(b.live_bytes, 0) - coalesce(a.live_bytes, 0))::bigint as grew_bytes
from a full join b using (role, rank_id, stack)
where coalesce(b.live_bytes, 0) > coalesce(a.live_bytes, 0)
order by grew_bytes desc, role, rank_id, stack
limit $top
"""
TOP_STACKS = 10

# The captures either run's figures leave out (rank_skew.left_out_captures): a rank's figures
# are its latest capture's where one profiler captured the same rank and step again.
LEFT_OUT = """
select run, role, rank_id, left_out_captures
from rank_skew
where run in ($a, $b) and left_out_captures is not null
order by run = $b, role, rank_id
"""


@dataclass
class Comparison:
    run_a: str
    run_b: str
    table: QueryResult  # per (role, rank): both runs' figures and the change; `regression` last
    regressions: list  # Regression per (role, rank), then TrainRegression per log metric
    stacks: list = field(default_factory=list)  # STACKS_GREW rows, as dicts
    thresholds: dict = field(default_factory=dict)  # {"peak_change_pct": %, "time_change_pct": %}
    notes: list = field(default_factory=list)  # one line per (run, role, rank) whose repeated captures are left out


def _metrics(rows: list[dict], side: str) -> dict[tuple[str, int], RankMetrics]:
    return {(r["role"], r["rank_id"]): RankMetrics(r[f"{side}_peak_bytes"], r[f"{side}_span_ns"])
            for r in rows if r[f"{side}_peak_bytes"] is not None or r[f"{side}_span_ns"] is not None}


def compare_runs(config: Config, run_a: str, run_b: str) -> Comparison:
    """Run B against run A (the baseline), per (role, rank) present in either, asked on one connection."""
    with reading(config) as reader:
        return _compare(reader, config, run_a, run_b)


def _compare(reader: Reader, config: Config, run_a: str, run_b: str) -> Comparison:
    known = {r[0] for r in reader.query("select run from runs where run in (?, ?)", [run_a, run_b]).rows}
    for run in (run_a, run_b):
        if run not in known:
            raise RlwhError(f"no run {run!r} in {config.db_path}: see `rlwh runs`")
    result = reader.query(SIDE_BY_SIDE, {"a": run_a, "b": run_b})
    rows = _rows(result)
    regressions = find_regressions(_metrics(rows, "b"), _metrics(rows, "a"), config.peak_memory_pct,
                                   config.role_span_pct)
    logs = {run: train_figures(_rows(reader.query(TRAIN_FIGURES, {"run": run})), config.train_metrics)
            for run in (run_a, run_b)}
    flagged: dict[tuple[str, int], list[str]] = {}
    for g in regressions:
        flagged.setdefault((g.role, g.rank_id), []).append("peak memory" if g.metric == "peak_live_bytes" else "time")
    shown = [c for c in result.columns if not c.endswith(("_bytes", "_span_ns"))]
    table = QueryResult(shown + ["regression"], [
        tuple(r[c] for c in shown) + (", ".join(flagged.get((r["role"], r["rank_id"]), [])) or None,)
        for r in rows
    ])
    stacks = _rows(reader.query(STACKS_GREW, {"a": run_a, "b": run_b, "top": TOP_STACKS}))
    notes = [f"run {run} role {role} rank {rank_id}: compared on its latest capture, leaving out {left_out}"
             for run, role, rank_id, left_out in reader.query(LEFT_OUT, {"a": run_a, "b": run_b}).rows]
    return Comparison(run_a, run_b, table, regressions + find_train_regressions(logs[run_b], logs[run_a], config),
                      stacks, {"peak_change_pct": config.peak_memory_pct, "time_change_pct": config.role_span_pct},
                      notes)


def _rows(result: QueryResult) -> list[dict]:
    return [dict(zip(result.columns, row)) for row in result.rows]
