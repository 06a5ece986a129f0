-- One row per span of a role on a rank: what RL-Insight's timeline chart draws.
-- NVTX ranges are role spans (one worker process of a colocated VeRL job runs several
-- roles, one range each, so a range's role is its name); MSTX ranges count when named
-- after the rank's role; every other capture (an Ascend rank dir or PyTorch trace whose
-- role comes from its folder) contributes the span its events cover: the earliest start
-- to the latest end of anything recorded in it (ops, memory events, annotations, a memory
-- snapshot's trace). Profilers record events outside the window they declare (a real MTIA
-- trace: from 99 ms before it to 16 ms after), so the declared window is not the span; it
-- stays its own row in ranges (source 'profiler'), and is the span only of a capture that
-- recorded no events. Times are on the row's clock: draw and compare each clock on its own
-- axis, never two on one.
create or replace view role_timeline (
  -- Run name.
  run,
  -- Role of the span.
  role,
  -- Global rank.
  rank_id,
  -- Capture the span came from (rank dir or trace file path relative to the profile dir).
  capture,
  -- Where the span came from: 'nvtx', 'mstx' or 'window' (what a capture's events cover; the profiler's declared window is ranges.source 'profiler').
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

recorded as (
  select run, role, rank_id, capture, step, ts_ns as start_ns, ts_ns + coalesce(dur_ns, 0) as end_ns from cpu_ops
  union all
  select run, role, rank_id, capture, step, alloc_ns, coalesce(release_ns, alloc_ns) from memory_records
  union all
  select run, role, rank_id, capture, step, start_ns, end_ns
  from ranges where source not in ('nvtx', 'mstx', 'profiler') and clock = 'epoch'
  union all
  select run, role, rank_id, capture, step, ts_ns, ts_ns from torch_memory_events
  union all
  select run, role, rank_id, capture, null, alloc_ns, coalesce(release_ns, alloc_ns)
  from snapshot_trace_blocks where clock = 'epoch' and alloc_ns is not null
),

event_windows as (
  select run, role, rank_id, capture, min(start_ns) as start_ns, max(end_ns) as end_ns, any_value(step) as step,
  from recorded
  where start_ns is not null
  group by run, role, rank_id, capture
),

declared_windows as (
  -- The profiler's declared window, for a capture that recorded no events.
  select p.run, p.role, p.rank_id, p.capture, min(p.start_ns) as start_ns, max(p.end_ns) as end_ns,
    any_value(p.step) as step,
  from ranges as p
  anti join event_windows as e using (run, rank_id, capture)
  where p.source = 'profiler' and p.clock = 'epoch'
  group by p.run, p.role, p.rank_id, p.capture
),

windows as (
  select
    w.run, w.role, w.rank_id, w.capture, 'window' as source, w.role as name, 'default' as domain,
    w.start_ns, w.end_ns, 'epoch' as clock, w.step,
  from (select * from event_windows union all select * from declared_windows) as w
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
