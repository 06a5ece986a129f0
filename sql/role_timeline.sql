-- One row per span of a role on a rank: what RL-Insight's timeline chart draws.
-- NVTX ranges are role spans (one worker process of a colocated VeRL job runs several
-- roles, one range each, so a range's role is its name); MSTX ranges count when named
-- after the rank's role; every other capture (an Ascend rank dir or PyTorch trace whose
-- role comes from its folder) contributes its whole profiled window: the profiler's own
-- recorded window where the trace has one (ranges with source 'profiler'), else the
-- earliest start to the latest end of anything recorded in it. Times are on the row's
-- clock: draw and compare each clock on its own axis, never two on one.
create or replace view role_timeline (
  -- Run name.
  run,
  -- Role of the span.
  role,
  -- Global rank.
  rank_id,
  -- Capture the span came from (rank dir or trace file path relative to the profile dir).
  capture,
  -- Where the span came from: 'nvtx', 'mstx' or 'window' (a capture's whole profiled window).
  source,
  -- Range name (the role itself for a window).
  name,
  -- NVTX/MSTX domain; 'default' when none.
  domain,
  -- Start, ns on the row's clock (epoch ns when clock = 'epoch').
  start_ns,
  -- End, ns on the row's clock.
  end_ns,
  -- end_ns - start_ns.
  dur_ns,
  -- Start in ms on the row's clock (ms since the epoch when clock = 'epoch'), as RL-Insight has it.
  start_time_ms,
  -- End in ms on the row's clock.
  end_time_ms,
  -- Duration in ms.
  duration_ms,
  -- Clock of the times: 'epoch', or 'nsys_session' (an NVTX export that does not say how its session clock maps to the epoch).
  clock,
  -- Training step the capture's path names; NULL when none.
  step
) as
with role_ranges as (
  select run, role, rank_id, capture, source, name, domain, start_ns, end_ns, clock, step
  from ranges
  where source = 'nvtx' or (source = 'mstx' and name = role)
),

ranged_captures as (
  select distinct run, rank_id, capture from role_ranges
),

profiler_windows as (
  select run, role, rank_id, capture, min(start_ns) as start_ns, max(end_ns) as end_ns, any_value(step) as step
  from ranges
  where source = 'profiler' and clock = 'epoch'
  group by run, role, rank_id, capture
),

recorded as (
  select run, role, rank_id, capture, step, ts_ns as start_ns, ts_ns + coalesce(dur_ns, 0) as end_ns from cpu_ops
  union all
  select run, role, rank_id, capture, step, alloc_ns, coalesce(release_ns, alloc_ns) from memory_records
  union all
  select run, role, rank_id, capture, step, start_ns, end_ns
  from ranges where source not in ('nvtx', 'mstx', 'profiler') and clock = 'epoch'
  union all
  select run, role, rank_id, capture, step, ts_ns, ts_ns from torch_memory_events
),

event_windows as (
  select r.run, r.role, r.rank_id, r.capture, min(r.start_ns) as start_ns, max(r.end_ns) as end_ns,
    any_value(r.step) as step,
  from recorded as r
  anti join profiler_windows as p using (run, rank_id, capture)
  where r.start_ns is not null
  group by r.run, r.role, r.rank_id, r.capture
),

windows as (
  select
    w.run, w.role, w.rank_id, w.capture, 'window' as source, w.role as name, 'default' as domain,
    w.start_ns, w.end_ns, 'epoch' as clock, w.step,
  from (select * from profiler_windows union all select * from event_windows) as w
  anti join ranged_captures as c using (run, rank_id, capture)
),

spans as (
  select * from role_ranges
  union all
  select * from windows
),

final as (
  select
    run, role, rank_id, capture, source, name, domain, start_ns, end_ns,
    end_ns - start_ns as dur_ns,
    start_ns / 1e6 as start_time_ms,
    end_ns / 1e6 as end_time_ms,
    (end_ns - start_ns) / 1e6 as duration_ms,
    coalesce(clock, 'epoch') as clock,
    step,
  from spans
)

select * from final
