-- One row per (phase range, device) of a rank: what the device did for the work launched
-- inside a named range. VeRL marks its phases (generate_sequences, compute_log_prob,
-- update_actor, ...) as NVTX, MSTX or torch user-annotation ranges, often several phases in
-- one worker process, so "how much GPU time did update_actor take on rank 5, and how much
-- of it was communication nothing hid" is a sum over this view.
--
-- A phase range is an NVTX, MSTX or torch_annotation range with a duration on the epoch
-- clock, except the profiler's own ProfilerStep#n and Kineto's GPU-side copies of user
-- annotations (domain 'gpu'). Its work is the rank's device activity (device_ops of the
-- same run and rank_id, any capture: a colocated worker's ranges and kernels may come from
-- two files) launched inside it: launch_ts_ns in [start_ns, end_ns), or where the source
-- links no launch (Ascend tasks), the activity's start on the device. Nested ranges each
-- count the work launched inside them; a range on several threads with the same name and
-- times is one range. The figures follow device_time's rule on the device's clock: the window runs from the work's first start to its last end, each figure
-- is the length of a union of intervals (streams overlapping count once), busy is every
-- kind and idle the window less busy.
create or replace view phase_device_time (
  -- Run name.
  run,
  -- Role of the capture the range was recorded in (a phase is inside its role).
  role,
  -- The phase: the range's name (update_actor, generate_sequences, ...).
  phase,
  -- Where the range came from: 'nvtx', 'mstx' or 'torch_annotation'.
  source,
  -- NVTX/MSTX domain; 'default' when none.
  domain,
  -- Global rank.
  rank_id,
  -- Capture the range came from.
  capture,
  -- The range's start on the CPU, ns since the epoch (with end_ns, with role and rank_id names one range).
  start_ns,
  -- The range's end on the CPU, ns since the epoch.
  end_ns,
  -- The profiler's step of the work (device_ops.step of its first activity); NULL when unmarked.
  step,
  -- Device, e.g. cuda:5, NPU:0.
  device,
  -- Device activities launched inside the range.
  activities,
  -- First start to last end of that work on the device, ns.
  window_ns,
  -- Time some compute kernel of the range ran (union over streams), ns.
  compute_ns,
  -- Time some collective of the range ran (union), ns.
  communication_ns,
  -- Communication while none of the range's compute ran, ns: the waiting on communication nothing hid.
  exposed_communication_ns,
  -- Time some memcpy of the range ran (union), ns.
  memcpy_ns,
  -- The window less all the range's device activity, ns.
  idle_ns
) as
with phases as (
  -- One row per range key: the same range on two threads (a copy the profiler wrote on
  -- another thread) would count its work twice.
  select distinct run, role, rank_id, capture, source, domain, name, start_ns, end_ns
  from ranges
  where source in ('nvtx', 'mstx', 'torch_annotation') and coalesce(domain, 'default') <> 'gpu'
    and coalesce(clock, 'epoch') = 'epoch' and end_ns > start_ns and not starts_with(name, 'ProfilerStep#')
),

devices as (
  select run, role, rank_id, capture, any_value(device) as device from ranks group by all
),

work as (
  select
    p.run, p.role, p.name as phase, p.source, coalesce(p.domain, 'default') as domain, p.rank_id, p.capture,
    p.start_ns as range_start_ns, p.end_ns as range_end_ns,
    d.step, coalesce(d.device, v.device) as device, d.kind, d.start_ns as s, d.end_ns as e,
  from phases as p
  join device_ops as d
    on d.run = p.run and d.rank_id = p.rank_id
    and coalesce(d.launch_ts_ns, d.start_ns) >= p.start_ns and coalesce(d.launch_ts_ns, d.start_ns) < p.end_ns
  left join devices as v
    on d.run = v.run and d.role = v.role and d.rank_id = v.rank_id and d.capture = v.capture
  where d.end_ns > d.start_ns
),

labelled as (
  select
    * exclude (kind),
    unnest(['busy'] || case kind
      when 'compute' then ['compute', 'compute_or_communication']
      when 'communication' then ['communication', 'compute_or_communication']
      when 'memcpy' then ['memcpy']
      else [] end) as label,
  from work
),

islands as (
  select
    *,
    sum(starts_island::integer) over (
      partition by run, role, phase, source, domain, rank_id, capture, range_start_ns, range_end_ns, device, label
      order by s, e rows unbounded preceding
    ) as island,
  from (
    select
      *,
      coalesce(s > max(e) over (
        partition by run, role, phase, source, domain, rank_id, capture, range_start_ns, range_end_ns, device, label
        order by s, e rows between unbounded preceding and 1 preceding
      ), true) as starts_island,
    from labelled
  )
),

unions as (
  select run, role, phase, source, domain, rank_id, capture, range_start_ns, range_end_ns, device, label,
    sum(island_ns) as union_ns,
  from (
    select run, role, phase, source, domain, rank_id, capture, range_start_ns, range_end_ns, device, label, island,
      max(e) - min(s) as island_ns,
    from islands
    group by all
  )
  group by all
),

spans as (
  select run, role, phase, source, domain, rank_id, capture, range_start_ns, range_end_ns, device,
    count(*) as activities, min(s) as first_ns, max(e) as last_ns, min(step) as step,
  from work
  group by all
),

figures as (
  select run, role, phase, source, domain, rank_id, capture, range_start_ns, range_end_ns, device,
    coalesce(sum(union_ns) filter (where label = 'compute'), 0) as compute_ns,
    coalesce(sum(union_ns) filter (where label = 'communication'), 0) as communication_ns,
    coalesce(sum(union_ns) filter (where label = 'compute_or_communication'), 0) as either_ns,
    coalesce(sum(union_ns) filter (where label = 'memcpy'), 0) as memcpy_ns,
    coalesce(sum(union_ns) filter (where label = 'busy'), 0) as busy_ns,
  from unions
  group by all
),

final as (
  select
    s.run, s.role, s.phase, s.source, s.domain, s.rank_id, s.capture, s.range_start_ns as start_ns,
    s.range_end_ns as end_ns, s.step, s.device, s.activities,
    s.last_ns - s.first_ns as window_ns,
    f.compute_ns::bigint as compute_ns,
    f.communication_ns::bigint as communication_ns,
    (f.either_ns - f.compute_ns)::bigint as exposed_communication_ns,
    f.memcpy_ns::bigint as memcpy_ns,
    (s.last_ns - s.first_ns - f.busy_ns)::bigint as idle_ns,
  from spans as s
  join figures as f
    on s.run = f.run and s.role = f.role and s.phase = f.phase and s.source = f.source and s.domain = f.domain
    and s.rank_id = f.rank_id and s.capture = f.capture and s.range_start_ns = f.range_start_ns
    and s.range_end_ns = f.range_end_ns and (s.device = f.device or (s.device is null and f.device is null))
)

select * from final
