-- Which captures of a rank the views count: the one rule for a (run, role, rank_id) that
-- holds several captures. Private helper of every view that adds up or compares a rank's
-- figures across its captures (rank_skew, and through it `rlwh summary` and `rlwh compare`;
-- collectives and the views built on them; kernel_stats, slowest_links,
-- collective_bandwidth, gmm_imbalance, gmm_layer_load, step_metrics) and of the warning
-- `rlwh ingest` prints (`rlwh check` says the same from the files, before any row lands).
--
-- Captures of one rank are parts of its run where they differ in step or profiler: the
-- captures of VeRL's step folders (`<step>/`, `step_<n>/`), or a PyTorch trace, its NVTX
-- export and its memory snapshot. Those are all counted. Two captures of the same profiler
-- for the same (run, role, rank_id, step) are the same thing measured twice: two profiling
-- sessions written into one folder (a text export and a db export of the same ranks made
-- an hour apart, a rerun). Adding them up doubles the rank's time; so of those only the
-- latest is counted: the latest capture_started_ns (ranks), then the latest file mtime,
-- then the last capture path in sort order. The others keep every row in the base tables
-- and in the per-capture views (device_time, memory_peak, role_timeline carry `capture`),
-- and rank_skew names them in left_out_captures.
--
-- One capture folder holding both a text and a db export of one session is one capture:
-- ingest loads the text export and marks the db file ignored, so nothing here sees it twice.
--
-- One row per loaded capture: counted, repeats (the captures of its rank, step and profiler,
-- itself included) and counted_capture (the one counted among them). A capture with no rank
-- (a VeRL log) is always counted, and so is every memory snapshot: a snapshot is the
-- allocator's state at one moment, a rank's snapshots a series (rank_skew takes the highest
-- peak of them), never a repeat. Views apply the rule through internal.left_out_captures.
create or replace view internal.rank_captures as
with loaded as (
  select
    run, capture,
    any_value(role) as role,
    any_value(rank_id) as rank_id,
    any_value(step) as step,
    case
      when bool_or(kind like 'ascend%') then 'ascend'
      else min(kind)
    end as profiler,
    max(mtime) as mtime,
  from sources
  where capture is not null and kind <> 'ignored' and status in ('ok', 'partial')
  group by run, capture
),

started as (
  select run, capture, min(capture_started_ns) as capture_started_ns
  from ranks
  group by run, capture
),

ordered as (
  select
    l.run, l.role, l.rank_id, l.step, l.profiler, l.capture, s.capture_started_ns,
    case when apart then 1 else row_number() over same_rank end as latest_first,
    case when apart then 1 else count(*) over (partition by l.run, l.role, l.rank_id, l.step, l.profiler) end
      as repeats,
    first_value(l.capture) over same_rank as counted_capture,
  from (select *, rank_id is null or profiler = 'torch_snapshot' as apart from loaded) as l
  left join started as s using (run, capture)
  window same_rank as (
    partition by l.run, l.role, l.rank_id, l.step, l.profiler
    order by s.capture_started_ns desc nulls last, l.mtime desc nulls last, l.capture desc
  )
)

select
  run, role, rank_id, step, profiler, capture, capture_started_ns,
  latest_first = 1 as counted,
  repeats,
  case when latest_first = 1 then capture else counted_capture end as counted_capture,
from ordered
