"""`make demo`: build a realistic small profile, ingest it, print answers, render reports.

Everything the demo reads it writes itself (rlwh.synth), so it runs on
a fresh machine with no profiler, no torch and no ../shared.
"""

from __future__ import annotations

import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

from rlwh.config import load_config
from rlwh.ingest.runner import ingest
from rlwh.report.terminal import as_table
from rlwh.warehouse.catalog import Reader, reading

ROLES = ("actor_update", "rollout")
CAPTURE_TIME = "20260526_085155"  # when the demo job's first Ascend capture starts (UTC)
RANKS = 2


def write_demo_profile(root: Path) -> Path:
    """A run dir with every format rlwh reads, for 2 roles x 2 ranks: Ascend rank dirs
    (memory CSV, traces with stacks, MSTX, Overlap Analysis), PyTorch traces, NVTX
    exports of a colocated worker, GMM expert-load dumps, memory_record.csv beside each
    operator_memory.csv and a memory snapshot per critic rank."""
    from rlwh import synth
    from rlwh.synth import timelines as synth_timelines
    from rlwh.synth.memory_record import write_memory_record
    from rlwh.synth.snapshot import write_snapshot
    from rlwh.synth.step_trace import write_step_trace_time

    # with_stack on, as a user who asks "which line" profiles: every forward op has a stack.
    # with_collectives: HCCL allreduces and kernels on two streams, for the device lanes and the
    # collectives page. Each rank's clock starts at its capture time, a second after the rank
    # before it (two hosts whose clocks disagree): the collectives' end times show the second
    # (clock_offsets) and collectives puts the arrivals on rank 0's clock, so the waits are
    # the milliseconds the ranks really sat in them, not the second between their clocks.
    synth.write_ascend_profile(root / "ascend", roles=ROLES, ranks=RANKS, stacked_fraction=0.55,
                               capture_time=CAPTURE_TIME, with_collectives=True)
    for rank_dir in sorted((root / "ascend").rglob("*_ascend_pt")):
        write_memory_record(rank_dir)  # the allocator's totals over time, as torch_npu writes them
        write_step_trace_time(rank_dir)  # each step's computing / communication / free time
    # One job, one clock: the critic's traces start ten minutes after the last Ascend role.
    critic_at_ns = int(datetime.strptime(CAPTURE_TIME, "%Y%m%d_%H%M%S").replace(tzinfo=timezone.utc).timestamp()
                       + 600 * len(ROLES)) * 1_000_000_000
    for rank in range(RANKS):
        synth_timelines.write_torch_trace(
            root / "torch" / "critic" / f"prof_rank-{rank}.pt.trace.json.gz", rank=rank, world_size=RANKS,
            start_ns=1_000_000, base_ns=critic_at_ns - 1_000_000)
        # The critic's memory snapshot, dumped after its step (torch.cuda.memory._snapshot()).
        write_snapshot(root / "torch" / "critic" / f"snapshot_rank{rank}.pickle", device=rank,
                       start_us=critic_at_ns // 1000 + 10_000, seed=rank)
        # The colocated worker's NVTX ranges (phases of its role, actor_rollout_ref: VeRL's
        # ActorRolloutRefWorker), on the run's clock: its session began with the critic.
        synth_timelines.write_nvtx_export(
            root / "nvtx" / NVTX_ROLE / f"worker_process_{7000 + rank}.1.jsonl", rank=rank,
            roles={"generate_sequences": 900, "compute_log_prob": 300, "update_actor": 1200},
            utc_start_ns=critic_at_ns + 60_000_000_000)
    synth_timelines.write_gmm_dumps(root / "gmm", ranks=RANKS)
    write_verl_demo_log(root, critic_at_ns)
    return root


# The role of the colocated worker whose phases the NVTX exports record.
NVTX_ROLE = "actor_rollout_ref"
# The demo trainer's steps and the phases (ms) of step 2, which its profile captured with nsys.
LOG_STEPS = 6
PROFILED_PHASES_MS = {"generate_sequences": 900, "compute_log_prob": 300, "update_actor": 1200}
LOG_PHASE_OF = {"generate_sequences": "gen", "compute_log_prob": "old_log_prob", "update_actor": "update_actor"}


def write_verl_demo_log(root: Path, critic_at_ns: int) -> None:
    """The trainer's console log (wandb's files/output.log) for steps 1..LOG_STEPS, and an
    NVTX capture of step 2 of every rank in VeRL's step_<n> layout. The log's step-2 phases
    are what the driver times: from the first rank entering a phase to the last leaving
    it, as the capture shows them; with the GMM dumps of steps 1 and 2, the log's steps
    match the profile's."""
    from rlwh.synth import timelines as synth_timelines
    from rlwh.synth.verl_log import write_verl_log

    captures = [synth_timelines.write_nvtx_export(
        root / "nvtx" / NVTX_ROLE / "step_2" / f"worker_process_{7000 + rank}.2.jsonl", rank=rank,
        roles=PROFILED_PHASES_MS, seed=2, utc_start_ns=critic_at_ns + 120_000_000_000)
        for rank in range(RANKS)]  # VeRL profiles every rank at the same steps
    phases = {LOG_PHASE_OF[name]: round(seconds, 3) for name, seconds in _phase_spans_s(captures).items()}
    write_verl_log(root / "trainer" / "wandb" / f"run-{CAPTURE_TIME}-demo" / "files" / "output.log",
                   steps=LOG_STEPS, phases={2: phases})


def _phase_spans_s(captures: list[Path]) -> dict[str, float]:
    """Per NVTX range name, seconds from its earliest start to its latest end over the files."""
    import json

    spans: dict[str, tuple[int, int]] = {}
    for path in captures:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        names = {r["id"]: r["value"] for r in rows if r.get("table") == "StringIds"}
        for r in rows:
            if r.get("table") == "NVTX_EVENTS":
                name = names[r["textId"]]
                lo, hi = spans.get(name, (r["start"], r["end"]))
                spans[name] = (min(lo, r["start"]), max(hi, r["end"]))
    return {name: (hi - lo) / 1e9 for name, (lo, hi) in spans.items()}


PEAKS_SQL = """
select role, rank_id, device, regexp_extract(capture, '[^/]+$') as capture_file, peak_live_mb, allocator_peak_mb,
       strftime(make_timestamp(peak_at_ns // 1000), '%H:%M:%S.%g') as peak_at_utc
from memory_peak order by role, rank_id, device, capture
"""

TOP_STACKS_SQL = """
select role, rank_id, regexp_extract(capture, '[^/]+$') as capture_file, user_frame,
       coalesce(name, '(no op: snapshot)') as name, blocks, live_mb, round(100 * share_of_peak, 1) as pct_of_peak
from memory_peak_breakdown
qualify row_number() over (partition by role, rank_id, capture, device order by live_bytes desc) <= 2
order by role, rank_id, capture, live_mb desc
"""


CLOCKS_SQL = """
select role, rank_id, round(offset_ns / 1e6, 3) as offset_ms, round(end_spread_ns / 1e6, 3) as spread_ms, aligned
from clock_offsets order by role, rank_id
"""

STEPS_SQL = """
select step, is_profiled, round(timing_step_s, 3) as log_step_s, round(timing_gen_s, 3) as log_gen_s,
       round(profile_gen_s, 3) as profile_gen_s, round(timing_update_actor_s, 3) as log_update_actor_s,
       round(profile_update_actor_s, 3) as profile_update_actor_s, round(throughput, 1) as throughput
from step_metrics order by step
"""


def _show(reader: Reader, title: str, sql: str) -> None:
    """A table with the query that made it above it: some columns are computed (MB, a
    clock time), so a reader copies the query, not the column names."""
    print(f"\n{title}:")
    print("  " + "\n  ".join(line for line in sql.strip().splitlines()))
    print(as_table(reader.query(sql)))


def run_demo(out: Path) -> int:
    out = out.resolve()
    profile = out / "profile" / "demo-run"
    if profile.exists():
        shutil.rmtree(profile)
    write_demo_profile(profile)
    config = load_config(db=out / "warehouse.duckdb")
    config.db_path.unlink(missing_ok=True)  # every demo starts from an empty warehouse
    summary = ingest(profile, config)
    print(f"ingested {profile}: {len(summary.results)} files, {summary.rows:,} rows, "
          f"{summary.failed} failed, {summary.seconds:.1f} s -> {config.db_path}")
    with reading(config) as reader:
        for title, sql in (("Peak memory per rank (memory_peak)", PEAKS_SQL),
                           ("Top call stacks live at each rank's peak (memory_peak_breakdown)", TOP_STACKS_SQL),
                           ("Each rank's clock against rank 0's, from the collectives' end times (clock_offsets)",
                            CLOCKS_SQL),
                           ("The training log's steps beside the profile's (step_metrics)", STEPS_SQL)):
            _show(reader, title, sql)
    try:
        from rlwh.report import build_report
    except ImportError:
        pass  # no reports without their dependencies
    else:
        pages = build_report(config, out=out / "reports")
        print(f"\nreports: {len(pages)} pages, open {out / 'reports' / 'index.html'}")
    print(f"\nexplore: {Path(sys.executable).parent / 'duckdb'} -readonly {config.db_path}")
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(run_demo(Path(sys.argv[1] if len(sys.argv) > 1 else "demo")))
