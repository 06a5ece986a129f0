-- One row per span of a role on a rank: what RL-Insight's timeline chart draws.
-- An NVTX or MSTX range named after its row's role is a span of that role; every other
-- range is a phase inside the role (phase_device_time), never a role of its own. Every
-- capture without such a range (an Ascend rank dir, a PyTorch trace, an NVTX export whose
-- ranges are phases such as update_actor and generate_sequences) contributes the span its
-- events cover: the earliest start to the latest end of anything recorded in it (ops,
-- memory events, annotations, NVTX ranges, a memory snapshot's trace). Profilers record events outside the window they declare (a real MTIA
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
  -- Where the span came from: 'nvtx' or 'mstx' (a range named after the role), or 'window' (what a capture's events cover, its NVTX phase ranges included; the profiler's declared window is ranges.source 'profiler').
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
with role_ranges as not materialized (
  -- Used twice (spans, ranged_captures) and not materialized: a query's filter on run
  -- reaches the scan of ranges in both uses.
  select run, role, rank_id, capture, source, name, domain, start_ns, end_ns, clock, step
  from ranges
  where source in ('nvtx', 'mstx') and name = role
),

ranged_captures as (
  select distinct run, rank_id, capture from role_ranges
),

recorded as (
  select run, role, rank_id, capture, step, ts_ns as start_ns, ts_ns + coalesce(dur_ns, 0) as end_ns, 'epoch' as clock,
    false as declared,
  from cpu_ops
  union all
  select run, role, rank_id, capture, step, alloc_ns, coalesce(release_ns, alloc_ns), 'epoch', false from memory_records
  union all
  -- An NVTX export's phases on their own clock (an nsys session clock stays its own window).
  select run, role, rank_id, capture, step, start_ns, end_ns, coalesce(clock, 'epoch'), false
  from ranges where source = 'nvtx' or (source not in ('mstx', 'profiler') and clock = 'epoch')
  union all
  select run, role, rank_id, capture, step, ts_ns, ts_ns, 'epoch', false from torch_memory_events
  union all
  select run, role, rank_id, capture, null, alloc_ns, coalesce(release_ns, alloc_ns), 'epoch', false
  from snapshot_trace_blocks where clock = 'epoch' and alloc_ns is not null
  union all
  -- The profiler's declared window: the span only of a capture that recorded no events.
  select run, role, rank_id, capture, step, start_ns, end_ns, 'epoch', true
  from ranges where source = 'profiler' and clock = 'epoch'
),

capture_windows as (
  select
    run, role, rank_id, capture, min(start_ns) as start_ns, max(end_ns) as end_ns, any_value(step) as step, clock,
    declared,
  from recorded
  where declared or start_ns is not null
  group by run, role, rank_id, capture, clock, declared
),

event_or_declared as (
  -- One pass over the events, no anti join (whose right side a query's filter on run would not
  -- reach): a declared window is dropped where its capture (run, rank_id, capture) recorded events.
  select *, bool_or(not declared) over (partition by run, rank_id, capture) as has_events,
  from capture_windows
),

windows as (
  select
    w.run, w.role, w.rank_id, w.capture, 'window' as source, w.role as name, 'default' as domain,
    w.start_ns, w.end_ns, w.clock, w.step,
  from event_or_declared as w
  anti join ranged_captures as c using (run, rank_id, capture)
  where not (w.declared and w.has_events and w.rank_id is not null and w.capture is not null)
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
