"""`rlwh summary [RUN]`: the answer to "how did this run go" in the terminal.

The run's roles with their ranks, captures, steps and files (as `rlwh check` lists
them). Per role and rank: peak live memory and time in the role against the role's median
(stragglers and memory outliers flagged, from rank_skew), who waited for whom at each
step's collectives (stragglers), each rank's clock offset (clock_offsets) and where the device time
went (device_time), the call stacks holding the
most memory at each rank's peak (memory_peak_breakdown), the captures whose ops carry
no call stack (profiled without with_stack) and how to record them, and every file that
failed or loaded only in part. Each section is one query over the public views, so what it
prints can be reproduced with `rlwh query`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.report import queries as Q
from rlwh.stacks import record_stacks_params
from rlwh.warehouse.catalog import QueryResult, Reader, reading

TOP_STACKS_PER_RANK = 3
TOP_RATES_PER_ROLE = 5
TOP_LINKS_PER_STEP = 3

RUN_FACTS = """
select r.run, r.profile_dir, r.last_ingested_at,
  (select count(*) from sources s where s.run = r.run and s.status <> 'ignored') as files,
  (select count(*) from sources s where s.run = r.run and s.status = 'failed') as failed,
  (select count(*) from sources s where s.run = r.run and s.status = 'partial') as partial,
  (select count(*) from sources s where s.run = r.run and s.status = 'ignored') as ignored
from runs r where r.run = $run
"""

PER_RANK = """
select role, rank_id,
  round(peak_live_bytes / 1048576, 1) as peak_live_mib,
  round(peak_vs_median, 2) as peak_vs_median,
  round(span_ns / 1e6, 3) as time_in_role_ms,
  round(span_vs_median, 2) as time_vs_median,
  nullif(concat_ws(', ', case when is_straggler then 'straggler' end,
                         case when is_memory_outlier then 'memory outlier' end), '') as flags
from rank_skew where run = $run
order by role, rank_id
"""

# user_frame first (the innermost Python frame outside library code, the line a user
# would change), then call_stack_top; a memory snapshot's blocks from before its trace
# began recording say so where they have no operator.
TOP_STACKS = """
select role, rank_id, round(live_bytes / 1048576, 1) as live_mib,
  round(100 * share_of_peak, 1) as pct_of_peak,
  coalesce(name, if(allocated_before_recording, '(allocated before recording)', null)) as op,
  user_frame, call_stack_top
from memory_peak_breakdown anti join internal.left_out_captures using (run, capture) where run = $run
qualify row_number() over (partition by role, rank_id order by live_bytes desc, name) <= {top}
order by role, rank_id, live_bytes desc, name
"""

# Who waits for whom: per step, the rank the others waited for at the collectives (the
# stragglers view), and what each rank's device did (device_time).
# The waits of the instances stragglers leaves out (mismatched, or a wait longer than the
# stay: clocks that disagree) are counted in left_out, never in who_waited.
WAITS = """
with judged as (
  select *
  from collectives where run = $run
  qualify not bool_or(mismatched or coalesce(wait_capped, false))
    over (partition by role, step, "group", name, seq, seq_is_global)
),
waiting as (
  select role, step, rank_id, sum(wait_ns) as wait_ns
  from judged where wait_ns > 0
  group by role, step, rank_id
),
who as (
  select role, step,
    string_agg('rank ' || rank_id || ' ' || round(wait_ns / 1e6, 3) || ' ms', ', ' order by wait_ns desc)
      as who_waited,
  from waiting group by role, step
)
select s.role, s.step, s.rank_id as waited_for_rank, round(s.waited_for_ns / 1e6, 3) as others_waited_ms,
  round(s.late_ns / 1e6, 3) as late_at_first_ms, s.last_at || ' of ' || s.collectives as arrived_last_at,
  w.who_waited, nullif(s.left_out, 0) as left_out, case when s.is_straggler then 'straggler' end as flag
from stragglers s
left join who w on s.role = w.role and (s.step = w.step or (s.step is null and w.step is null))
where s.run = $run
order by s.role, s.step
"""

# Each rank's clock against its role's reference rank (clock_offsets): the offset the
# collectives' end times measure, and whether the arrivals above were shifted by it.
CLOCKS = """
select role, rank_id, reference_rank, instances as collectives_shared, round(offset_ns / 1e6, 3) as offset_ms,
  round(end_spread_ns / 1e6, 3) as spread_ms, impossible_instances || ' / ' || impossible_after_shift
    as impossible_before_after_shift,
  case when aligned then 'aligned' end as flag
from clock_offsets where run = $run
order by role, rank_id
"""

# device_time beside why the device idled (device_idle: host wait, kernel wait, other).
DEVICE_TIME = """
with idle as (
  select role, rank_id, sum(host_wait_ns) as host_wait_ns, sum(kernel_wait_ns) as kernel_wait_ns,
    sum(other_wait_ns) as other_wait_ns
  from device_idle anti join internal.left_out_captures using (run, capture) where run = $run
  group by role, rank_id
),
device as (
  select role, rank_id, count(distinct step) as steps, sum(window_ns) as window_ns, sum(compute_ns) as compute_ns,
    sum(exposed_communication_ns) as exposed_ns, sum(overlapped_ns) as overlapped_ns, sum(idle_ns) as idle_ns
  from device_time anti join internal.left_out_captures using (run, capture) where run = $run
  group by role, rank_id
)
select d.role, d.rank_id, d.steps,
  round(d.window_ns / 1e6, 3) as window_ms,
  round(d.compute_ns / 1e6, 3) as compute_ms,
  round(d.exposed_ns / 1e6, 3) as exposed_comm_ms,
  round(d.overlapped_ns / 1e6, 3) as overlapped_ms,
  round(d.idle_ns / 1e6, 3) as idle_ms,
  round(i.host_wait_ns / 1e6, 3) as host_wait_ms,
  round(i.kernel_wait_ns / 1e6, 3) as kernel_wait_ms,
  round(i.other_wait_ns / 1e6, 3) as other_wait_ms
from device as d
left join idle as i on d.role = i.role and d.rank_id = i.rank_id
order by d.role, d.rank_id
"""

# What the device did for each RL phase range (NVTX / MSTX / user annotation), per rank.
PHASES = """
select role, phase, rank_id, count(*) as ranges,
  round(sum(window_ns) / 1e6, 3) as device_window_ms,
  round(sum(compute_ns) / 1e6, 3) as compute_ms,
  round(sum(communication_ns) / 1e6, 3) as communication_ms,
  round(sum(exposed_communication_ns) / 1e6, 3) as exposed_comm_ms,
  round(sum(memcpy_ns) / 1e6, 3) as memcpy_ms,
  round(sum(idle_ns) / 1e6, 3) as idle_ms
from phase_device_time anti join internal.left_out_captures using (run, capture) where run = $run
group by role, phase, rank_id
order by role, phase, rank_id
"""

# How fast the collectives moved their bytes: the slowest instances per role
# (collective_bandwidth; the collectives page's query, in ms, MB and GB/s).
RATES = f"""
select role, step, name, "group", seq, ranks, round(bytes / 1e6, 3) as mb,
  round(longest_stay_ns / 1e6, 3) as longest_stay_ms, round(slowest_algbw_gbps, 3) as slowest_algbw_gbps,
  round(transfer_gbps, 3) as transfer_gbps, case when mismatched then 'mismatched' end as flag
from ({Q.SLOWEST_COLLECTIVES})
order by role, transfer_gbps nulls last, slowest_algbw_gbps
"""

# The slowest links between ranks of each step (slowest_links: the Ascend communication matrix).
LINKS = """
select role, step, slowness_rank, rank_id as from_rank,
  coalesce(dst_rank_id::varchar, 'group rank ' || dst_rank) as to_rank, collective, transport_type,
  round(size_bytes / 1e6, 3) as mb, round(duration_ns / 1e6, 3) as ms, round(bandwidth_gbps, 3) as gbps,
  round(of_transport_median, 3) as of_transport_median
from slowest_links where run = $run and slowness_rank <= $max_links
order by role, step, slowness_rank
"""

# The captures the views leave out: the same profiler captured a rank and step again, and
# only the latest counts (sql/internal/rank_captures.sql).
LEFT_OUT = """
select role, rank_id, capture, counted_capture
from internal.rank_captures where run = $run and not counted
order by role, rank_id, capture
"""

# The run's roles as `rlwh check` lists them: every file read, by the role it landed under
# ('(none)' where nothing names one: a driver's log, a dump whose layout names no role).
ROLES = """
select coalesce(role, '(none)') as role,
  coalesce(string_agg(distinct rank_id::varchar, ',' order by rank_id::varchar), '-') as ranks,
  count(distinct capture) as captures,
  coalesce(string_agg(distinct step::varchar, ',' order by step::varchar), '-') as steps,
  count(*) as files
from sources where run = $run and status <> 'ignored'
group by all
order by role
"""

BAD_FILES = """
select status, role, rank_id, path, rows, message
from sources where run = $run and status in ('failed', 'partial')
order by status, path
"""

LATEST_RUN = "select run from runs order by last_ingested_at desc, run limit 1"


@dataclass
class Section:
    title: str
    result: QueryResult
    when_empty: str


@dataclass
class RunSummary:
    run: str
    header: str
    sections: list[Section]


def summarize(config: Config, run: str | None = None) -> RunSummary:
    """The summary of `run`, or of the run ingested last when None, asked on one connection."""
    with reading(config) as reader:
        return _summarize(reader, config, run)


def _flagged(per_rank: QueryResult) -> QueryResult:
    """The rows of PER_RANK with a flag (its view costs a fifth of the summary: asked once)."""
    flags = per_rank.columns.index("flags")
    return QueryResult(per_rank.columns, [row for row in per_rank.rows if row[flags] is not None],
                       f"select * from ({PER_RANK}) where flags is not null")


def _summarize(reader: Reader, config: Config, run: str | None) -> RunSummary:
    if run is None:
        latest = reader.query(LATEST_RUN).rows
        if not latest:
            raise RlwhError(f"{config.db_path} holds no run yet: run `rlwh ingest PROFILE_DIR` first")
        run = latest[0][0]
    facts = reader.query(RUN_FACTS, {"run": run})
    if not facts.rows:
        raise RlwhError(f"no run {run!r} in {config.db_path}: see `rlwh runs`")
    name, profile_dir, ingested_at, files, failed, partial, ignored = facts.rows[0]
    header = (f"run {name}: {files} files read ({failed} failed, {partial} partial; {ignored} ignored), "
              f"last ingested {str(ingested_at)[:19]} UTC from {profile_dir}")
    for role, rank_id, capture, counted in reader.query(LEFT_OUT, {"run": run}).rows:
        header += (f"\n{'role ' + role + ' ' if role else ''}rank {rank_id}: {capture} is left out, a repeat of "
                   f"{counted} (the same profiler, rank and step); every figure below counts {counted} only")
    params = {"run": run}
    per_rank = reader.query(PER_RANK, params)
    return RunSummary(run, header, [
        Section("Roles: the ranks, captures, steps and files of each (as `rlwh check` lists them; NVTX and MSTX "
                "ranges are phases inside a role, below)", reader.query(ROLES, params), "no file read"),
        Section("Per role and rank: peak live memory and time in role, against the role's median",
                per_rank, "no memory or role spans for this run"),
        Section("Stragglers (the rank the others waited for at collectives; where a role ran none, "
                "time > 1.1 x median) and memory outliers (peak outside 0.9-1.1 x median)",
                _flagged(per_rank), "none"),
        Section("Who waits for whom: per step, the rank the others waited for at the collectives "
                "(each collective's waiting charged to its last arriver; left_out: instances charged to "
                "nobody, mismatched or a wait longer than the rank's stay: clocks that disagree)",
                reader.query(WAITS, params), "no collectives recorded for this run"),
        Section("Clocks across ranks: each rank's offset from its role's reference rank, from the collectives' "
                "end times (clock_offsets; aligned: the waits above are on the reference clock)",
                reader.query(CLOCKS, params), "no collectives recorded for this run"),
        Section("Where the device time went, per rank (summed over steps; device_time)",
                reader.query(DEVICE_TIME, params), "no device activity recorded for this run"),
        Section("Device time per phase range (the work launched inside each NVTX, MSTX or user-annotation "
                "range; phase_device_time)",
                reader.query(PHASES, params), "no phase range launched device work in this run"),
        Section(f"How fast the collectives moved their bytes: the {TOP_RATES_PER_ROLE} slowest per role, slowest "
                "transfer first (collective_bandwidth: bytes = elements x type size; algbw over a rank's whole "
                "stay, transfer after the last rank arrived)",
                reader.query(RATES, {**params, "max_rows": TOP_RATES_PER_ROLE}),
                "no collective records its size in this run"),
        Section(f"The {TOP_LINKS_PER_STEP} slowest links between ranks per step (slowest_links: the Ascend "
                "communication matrix; of_transport_median below 1: slower than the step's links of its transport)",
                reader.query(LINKS, {**params, "max_links": TOP_LINKS_PER_STEP}),
                "no communication matrix in this run"),
        Section(f"Call stacks holding the most memory at each rank's peak (top {TOP_STACKS_PER_RANK}, "
                "user_frame first)",
                reader.query(TOP_STACKS.format(top=TOP_STACKS_PER_RANK), params),
                "no memory records for this run"),
        Section("Captures without call stacks (profiled without with_stack: user_frame and call_stack_top are "
                "NULL for their ops and the memory they allocated; record_stacks_with says how to record them)",
                reader.query(Q.NO_STACK_CAPTURES, {**params, **record_stacks_params()}),
                "none: every capture with ops holds call stacks"),
        Section("Files that failed or loaded only in part", reader.query(BAD_FILES, params),
                "none: every file loaded whole"),
    ])
