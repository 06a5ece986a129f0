"""`rlwh nightly`: ingest the new or changed run dirs under a root, render their
reports, compare each with a baseline run, and rewrite the runs index.

Exit codes (NightlyResult.exit_code) are rlwh.exitcodes', the same as `rlwh ingest`'s,
so cron and CI can act on the outcome:
  0  clean: every run dir ingested, no regression
  1  a run dir could not be ingested, or a file in it failed
  5  a file loaded only in part (nothing failed)
  6  a run dir held no profiler file, or the root held no run dir
  3  regression: a (role, rank) of a run processed tonight rose beyond a threshold
The most severe wins, in that order: a run missing data cannot be compared fairly.

What was found is kept beside the index (nightly.json), so the index lists the
regressions of earlier nights without recomputing them, and a baseline's metrics are
not recomputed while its data is unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rlwh import exitcodes, report
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest.runner import ingest
from rlwh.report.compare_runs import RankMetrics, Regression, find_regressions, rule_text  # noqa: F401 (re-exported)
from rlwh.report.nightly_state import STATE_NAME, load_state, save_state  # noqa: F401 (re-exported)
from rlwh.report.queries import LOADED_RUNS, RUNS
from rlwh.warehouse.session import connect_read

EXIT_CLEAN = exitcodes.OK
EXIT_REGRESSION = exitcodes.REGRESSION
EXIT_INGEST_FAILED = exitcodes.FAILED
EXIT_PARTIAL = exitcodes.PARTIAL
EXIT_NOTHING_FOUND = exitcodes.NOTHING_FOUND


def run_prefix(run: str) -> str:
    """The part of a run name before its last '-' or '_': 'grpo-0412' -> 'grpo'."""
    cut = max(run.rfind("-"), run.rfind("_"))
    return run[:cut] if cut > 0 else run


def previous_run(run: str, runs: list[tuple[str, datetime]]) -> str | None:
    """The baseline rule: the run with the same prefix (run_prefix) that was first
    ingested last before `run` was; None when there is none. `runs`: (name, first_ingested_at)
    of the runs that may be baselines (the caller leaves out those that loaded no file)."""
    mine = dict(runs).get(run)
    if mine is None:
        return None
    earlier = [(at, name) for name, at in runs
               if name != run and run_prefix(name) == run_prefix(run) and (at, name) < (mine, run)]
    return max(earlier)[1] if earlier else None


@dataclass
class RunOutcome:
    """One run dir of the root tonight."""

    run: str
    profile_dir: Path
    status: str  # ingested | unchanged | empty | error (ingest raised)
    failed_files: int = 0
    message: str | None = None
    partial_files: int = 0
    pages: list[Path] = field(default_factory=list)
    baseline: str | None = None
    regressions: list[Regression] = field(default_factory=list)
    checked: bool = False

    @property
    def ingest_failed(self) -> bool:
        return self.status == "error" or self.failed_files > 0

    @property
    def incomplete(self) -> bool:
        """Data is missing for this run: a failure, a partial file, or no file at all."""
        return self.ingest_failed or self.partial_files > 0 or self.status == "empty"

    @property
    def exit_code(self) -> int:
        if self.ingest_failed:
            return exitcodes.FAILED
        if self.partial_files:
            return exitcodes.PARTIAL
        if self.status == "empty":
            return exitcodes.NOTHING_FOUND
        return exitcodes.REGRESSION if self.regressions else exitcodes.OK

    def problem(self) -> str:
        """One line for the index and the log: what is missing and why."""
        parts = []
        if self.status == "error":
            parts.append("could not be ingested")
        if self.failed_files:
            parts.append(f"{self.failed_files} file(s) failed")
        if self.partial_files:
            parts.append(f"{self.partial_files} file(s) loaded only in part")
        if self.status == "empty":
            parts.append("no profiler file found")
        return f"{self.run}: {', '.join(parts)}" + (f" ({self.message})" if self.message else "")


@dataclass
class NightlyResult:
    root: Path
    index: Path
    runs: list[RunOutcome]

    @property
    def regressions(self) -> list[Regression]:
        return [g for r in self.runs for g in r.regressions]

    @property
    def ingest_failures(self) -> list[RunOutcome]:
        return [r for r in self.runs if r.ingest_failed]

    @property
    def incomplete(self) -> list[RunOutcome]:
        return [r for r in self.runs if r.incomplete]

    @property
    def exit_code(self) -> int:
        """The most severe of the runs' codes (rlwh.exitcodes); 6 when the root held no run dir."""
        if not self.runs:
            return exitcodes.NOTHING_FOUND
        return exitcodes.most_severe(r.exit_code for r in self.runs)


def _known_runs(config: Config) -> set[str]:
    """The runs the warehouse holds (none where there is no warehouse yet)."""
    if not config.db_path.exists():
        return set()
    con = connect_read(config)
    try:
        return {row[0] for row in con.execute("select run from runs").fetchall()}
    finally:
        con.close()


def _run_dirs(root: Path) -> list[Path]:
    """Immediate subdirectories in name order: runs that arrive the same night are first
    ingested in that order (names usually carry a date or a sequence; mtimes of copied
    profiles do not)."""
    return sorted((d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")), key=lambda d: d.name)


def _ingest_dir(path: Path, config: Config) -> RunOutcome:
    try:
        summary = ingest(path, config)
    except (RlwhError, OSError) as exc:
        return RunOutcome(path.resolve().name, path, "error", message=str(exc))
    if not summary.results:
        return RunOutcome(summary.run, path, "empty", message="no profiler output found")
    changed = any(r.status != "unchanged" for r in summary.results)
    failed = [r for r in summary.results if r.status == "failed"]
    partial = [r for r in summary.results if r.status == "partial"]
    message = "; ".join(r.message or r.rel_path for r in (failed + partial)[:3]) or None
    return RunOutcome(summary.run, path, "ingested" if changed else "unchanged", len(failed), message,
                      partial_files=len(partial))


def _metrics(rows: list[dict]) -> dict[tuple[str, int], RankMetrics]:
    return {(r["role"], r["rank_id"]): RankMetrics(None if r["peak_live_bytes"] is None else int(r["peak_live_bytes"]),
                                                   r["span_ns"]) for r in rows}


def _baseline_metrics(s: report.ReportSession, run: str, last_ingested: str, state: dict) -> dict:
    cached = state.get("runs", {}).get(run, {})
    if cached.get("last_ingested_at") == last_ingested and isinstance(cached.get("metrics"), list):
        try:
            return {(str(m[0]), int(m[1])): RankMetrics(*(None if v is None else int(v) for v in m[2:4]))
                    for m in cached["metrics"]}
        except (TypeError, ValueError, IndexError):
            pass
    return _metrics(s.skew(run))


def run_nightly(config: Config, root: Path | None = None, out: Path | None = None,
                baseline: str | None = None) -> NightlyResult:
    """Ingest, render and check every new or changed run dir under `root`; rewrite the index.

    The index goes to out/index.html when `out` is given, else to [nightly] index. When
    nothing could ever be ingested (no warehouse yet) no index is written; exit_code says why.
    """
    root = Path(root or config.nightly_root)
    if not root.is_dir():
        raise RlwhError(f"nightly root not found: {root}")
    reports = Path(out or config.reports_dir)
    index = reports / "index.html" if out else Path(config.nightly_index)
    dirs = _run_dirs(root)
    if baseline is not None and baseline not in {d.name for d in dirs} and baseline not in _known_runs(config):
        # Said before a night of ingesting, not after it.
        raise RlwhError(f"--baseline {baseline!r} is neither a run of {config.db_path} nor a folder of {root}: "
                        "see `rlwh runs`")
    outcomes = [_ingest_dir(d, config) for d in dirs]
    if not config.db_path.exists():  # nothing was ever ingested: no index to write
        return NightlyResult(root, index, outcomes)
    state = load_state(index)
    state.setdefault("runs", {})
    con = connect_read(config)
    try:
        s = report.ReportSession(con, config.usage_component)
        runs = {r["run"]: r for r in s.rows(RUNS)}
        if baseline is not None and baseline not in runs:
            raise RlwhError(f"--baseline {baseline!r} is not a run of {config.db_path}: see `rlwh runs`")
        loaded = {r["run"] for r in s.rows(LOADED_RUNS)}  # a run that loaded nothing is no baseline
        history = [(name, r["first_ingested_at"]) for name, r in runs.items() if name in loaded]
        report.write_assets(reports)
        for o in outcomes:
            row = runs.get(o.run)
            known = state["runs"].get(o.run, {})
            fresh = known.get("last_ingested_at") == str(row["last_ingested_at"]) if row else False
            if row is None or (o.status == "unchanged" and fresh and (reports / report.slug(o.run)).is_dir()):
                continue
            o.pages = report.render_run(s, row, reports, config.train_metrics)
            _check(s, o, runs, history, baseline, config, state)
            _write_comparison(o, config, reports, index, baseline, state)
        summary = {
            "at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "regressions_found": sum(len(o.regressions) for o in outcomes),
            # Failed, partial and empty run dirs alike: the index must not look green over lost data.
            "ingest_failures": sum(1 for o in outcomes if o.incomplete),
            "rule": _rule_text(config, baseline),
        }
        summary["failures"] = [o.problem() for o in outcomes if o.incomplete]
        state["last_nightly"] = summary
        for o in outcomes:
            if o.run in state["runs"]:
                failed = f", {o.failed_files} file(s) failed" if o.failed_files else ""
                partial = f", {o.partial_files} file(s) partial" if o.partial_files else ""
                state["runs"][o.run]["status"] = o.status + failed + partial
        save_state(index, state)
        report.write_index(s, index, reports, state)
    finally:
        con.close()
    return NightlyResult(root, index, outcomes)


def _rule_text(config: Config, baseline: str | None) -> str:
    against = (f"run {baseline} (--baseline)." if baseline else
               "the previous run (by first ingest) whose name has the same prefix before its last '-' or '_'.")
    return rule_text(config, against)


def _write_comparison(o: RunOutcome, config: Config, reports: Path, index: Path, baseline: str | None,
                      state: dict) -> None:
    """The run-against-baseline page beside the run's pages, and links for the index: to
    that page, and from each regression to the rank's memory timeline."""
    if o.baseline is None:
        return
    from rlwh.report.compare_runs import compare_runs
    from rlwh.report.run_compare import write_compare_page

    run_dir = reports / report.slug(o.run)
    page = write_compare_page(compare_runs(config, o.baseline, o.run), run_dir, reports,
                              _rule_text(config, baseline), index)
    entry = state["runs"][o.run]
    entry["compare_page"] = os.path.relpath(page, index.parent)
    links = []
    for g in o.regressions:
        memory = run_dir / report.memory_page_name(g.role, g.rank_id) if g.rank_id is not None else None
        href = os.path.relpath(memory, index.parent) if memory is not None and memory.exists() else None
        links.append({"text": str(g), "memory_page": href})
    entry["regression_links"] = links


def _train_regressions(s: report.ReportSession, run: str, baseline: str, config: Config) -> list:
    """The training-log half of the rule (compare_runs.find_train_regressions): the medians
    of the chosen log metrics, run against baseline."""
    from rlwh.report.compare_runs import TRAIN_FIGURES, find_train_regressions, train_figures

    figures = {r: train_figures(s.rows(TRAIN_FIGURES, {"run": r}), config.train_metrics) for r in (run, baseline)}
    return find_train_regressions(figures[run], figures[baseline], config)


def _checked_words(o: RunOutcome) -> str:
    """What the check of run o found, in words (nightly.json; the index shows it where the
    run has no regression to list)."""
    if o.baseline is None:
        return "no baseline run"
    if o.regressions:
        return f"{len(o.regressions)} regression(s) vs {o.baseline}"
    return f"no regression vs {o.baseline}"


def _check(s: report.ReportSession, o: RunOutcome, runs: dict, history: list, baseline: str | None,
           config: Config, state: dict) -> None:
    """Compare run o with its baseline; remember its metrics for later nights."""
    current_rows = s.skew(o.run)
    o.baseline = baseline if baseline not in (None, o.run) else previous_run(o.run, history)
    if o.baseline is not None:
        before = _baseline_metrics(s, o.baseline, str(runs[o.baseline]["last_ingested_at"]), state)
        o.regressions = find_regressions(_metrics(current_rows), before, config.peak_memory_pct, config.role_span_pct)
        o.regressions += _train_regressions(s, o.run, o.baseline, config)
    o.checked = True
    state["runs"][o.run] = {
        "last_ingested_at": str(runs[o.run]["last_ingested_at"]),
        "baseline": o.baseline,
        "regressions": [str(g) for g in o.regressions],
        "checked": _checked_words(o),
        "metrics": [[r["role"], r["rank_id"], None if r["peak_live_bytes"] is None else int(r["peak_live_bytes"]),
                     r["span_ns"]] for r in current_rows],
    }
