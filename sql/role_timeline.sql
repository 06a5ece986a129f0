-- One row per span of a role on a rank: what RL-Insight's timeline chart draws.
-- NVTX ranges are role spans (one worker process of a colocated VeRL job runs several
-- roles, one range each, so a range's role is its name); MSTX ranges count when named
-- after the rank's role; every other capture (an Ascend rank dir or PyTorch trace whose
-- role comes from its folder) contributes its whole profiled window: the earliest start
-- to the latest end of anything recorded in it.
create or replace view role_timeline (
  -- Run name.
  run,
  -- Role of the span.
  role,
  -- Global rank.
  rank_id,
  -- Rank dir or trace file the span came from.
  capture,
  -- Where the span came from: 'nvtx', 'mstx' or 'window' (a capture's whole profiled window).
  source,
  -- Range name (the role itself for a window).
  name,
  -- NVTX/MSTX domain; 'default' when none.
  domain,
  -- Start, ns since the epoch.
  start_ns,
  -- End, ns since the epoch.
  end_ns,
  -- end_ns - start_ns.
  dur_ns,
  -- Start in ms since the epoch, as RL-Insight has it.
  start_time_ms,
  -- End in ms since the epoch.
  end_time_ms,
  -- Duration in ms.
  duration_ms
) as
with role_ranges as (
  select run, role, rank_id, capture, source, name, domain, start_ns, end_ns
  from ranges
  where source = 'nvtx' or (source = 'mstx' and name = role)
),

ranged_captures as (
  select distinct run, rank_id, capture from role_ranges
),

recorded as (
  select run, role, rank_id, capture, ts_ns as start_ns, ts_ns + coalesce(dur_ns, 0) as end_ns from cpu_ops
  union all
  select run, role, rank_id, capture, alloc_ns, coalesce(release_ns, alloc_ns) from memory_records
  union all
  select run, role, rank_id, capture, start_ns, end_ns from ranges where source not in ('nvtx', 'mstx')
  union all
  select run, role, rank_id, capture, ts_ns, ts_ns from torch_memory_events
),

windows as (
  select
    r.run, r.role, r.rank_id, r.capture, 'window' as source, r.role as name, 'default' as domain,
    min(r.start_ns) as start_ns, max(r.end_ns) as end_ns,
  from recorded as r
  anti join ranged_captures as c using (run, rank_id, capture)
  where r.start_ns is not null
  group by r.run, r.role, r.rank_id, r.capture
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
  from spans
)

select * from final
