-- One row per (run, role, rank_id, capture, step, device): where the device's time went
-- in the step, HTA's temporal breakdown and msprof's step_trace_time in one shape.
--
-- Every figure is the length of a union of intervals: kernels overlapping on several
-- streams count once. compute is the union of compute kernels, communication the union of
-- collectives, overlapped their intersection (communication while compute runs),
-- exposed_communication = communication - overlapped, memcpy the union of copies, idle the
-- window less the union of all device activity.
--
-- Ascend: the profiler's own figures. Where a capture has the trace's (or the db's)
-- Overlap Analysis rows (ranges with source 'overlap'), compute, communication, exposed
-- communication and idle are the sums of its Computing, Communication,
-- Communication(Not Overlapped) and Free rows in the step, so they equal
-- step_trace_time's Computing, Communication, Communication(Not Overlapped) and Free to
-- the ns, and overlapped = Communication - Communication(Not Overlapped) its Overlapped;
-- the window is the span of those rows. An Overlap row belongs to the step whose device
-- activity (device_ops of that profiler step, first start to last end) it starts in.
--
-- An Ascend capture without Overlap Analysis rows (a text export without trace_view.json,
-- a db export without OVERLAP_ANALYSIS) whose step_times has the step (step_trace_time.csv,
-- analysis.db's StepTraceTime): the profiler's own figures from there, Computing,
-- Communication, Overlapped, Communication(Not Overlapped) and Free; the window is
-- Computing + Communication(Not Overlapped) + Free (method step_trace_time).
--
-- An Ascend capture with neither: as the profiler computes it from TASK (kernels: those
-- with COMPUTE_TASK_INFO) and COMMUNICATION_OP, or from kernel_details.csv: the window
-- runs from the step's first kernel or collective to its last, busy is the union of
-- kernels and collectives (copies are not busy there), idle the window less busy (method
-- ascend_tasks; the text export rounds each row to the ns, so these figures may differ
-- from the profiler's by tens of ns).
--
-- Elsewhere (Kineto): the step's window is on the device's clock, from the first start of
-- the device activity the step launched (device_ops.step: the ProfilerStep#n its launch
-- falls in), as HTA measures an iteration from its first kernel. The CPU-side
-- ProfilerStep range is not the window: where the GPU runs behind the CPU (no sync inside
-- the step), a step's kernels run after the CPU has moved on. Where two steps' spans
-- overlap on the device (step n's last kernels still run when step n + 1's first one
-- starts, on another stream or a step later), the device's time is cut where each step's
-- first activity starts (internal.device_windows): step n's window ends where step n + 1's
-- begins, or where the activity begun so far ends, if that comes first. So no instant
-- counts in two steps: busy summed over a trace's rows is the union of its device
-- activity. Every figure counts the device's activity in the window, whichever step
-- launched it (a kernel of step n still running in step n + 1's window is busy there, not
-- idle). Activity launched outside every ProfilerStep has the row with a NULL step: the
-- parts of its span no step's window holds. Busy is the union of all device activity
-- (memcpy and memset count as busy, as HTA counts them) and idle the window less busy
-- (method intervals).
-- depends: internal.device_windows
create or replace view device_time (
  -- Run name.
  run,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Capture (path relative to the profile dir).
  capture,
  -- The profiler's step (device_ops.step); NULL for activity outside any marked step.
  step,
  -- Device, e.g. NPU:0, cuda:3 (Ascend text exports: ranks.device).
  device,
  -- The step's window on the device, ns (Ascend: span of the Overlap Analysis rows; Kineto: from the first start of the device activity the step launched to the next step's, or to the end of the activity begun so far; see internal.device_windows).
  window_ns,
  -- Time some compute kernel ran (union over streams), ns; Ascend: step_trace_time Computing.
  compute_ns,
  -- Time some collective ran (union), ns; Ascend: step_trace_time Communication.
  communication_ns,
  -- Communication while compute ran (intersection of the two unions), ns; Ascend: step_trace_time Overlapped.
  overlapped_ns,
  -- communication_ns - overlapped_ns: communication nothing hid, ns; Ascend: Communication(Not Overlapped).
  exposed_communication_ns,
  -- Time some memcpy ran (union), ns.
  memcpy_ns,
  -- The window less all device activity (union of every kind), ns; Ascend: step_trace_time Free.
  idle_ns,
  -- How the figures were computed: 'overlap_analysis' (the Ascend profiler's own rows), 'step_trace_time' (an Ascend capture without them: the profiler's figures from step_times), 'ascend_tasks' (an Ascend capture with neither: unions of its kernels and collectives) or 'intervals' (Kineto: unions of the device_ops the step launched, in their own span).
  method
) as
with overlap_rows as (
  select run, role, rank_id, capture, name, start_ns, end_ns
  from ranges
  where source = 'overlap'
),

overlap_captures as (
  select distinct run, capture from overlap_rows
),

op_steps as (
  select run, role, rank_id, capture, step, min(start_ns) as start_ns, max(end_ns) as end_ns,
    any_value(device) as device,
  from device_ops
  where step is not null
  group by run, role, rank_id, capture, step
),

rank_devices as (
  select run, role, rank_id, capture, any_value(device) as device from ranks group by all
),

-- Where two steps' device activity overlaps (the next step's first kernel before the last
-- collective of this one ends), a row belongs to the later step: once.
overlap_stepped as (
  select o.*, s.step, s.device
  from overlap_rows as o
  left join op_steps as s
    on o.run = s.run and o.role = s.role and o.rank_id = s.rank_id and o.capture = s.capture
    and o.start_ns >= s.start_ns and o.start_ns < s.end_ns
  qualify row_number() over (
    partition by o.run, o.role, o.rank_id, o.capture, o.name, o.start_ns, o.end_ns order by s.start_ns desc
  ) = 1
),

ascend as (
  select
    o.run, o.role, o.rank_id, o.capture, o.step, coalesce(any_value(o.device), any_value(r.device)) as device,
    max(o.end_ns) - min(o.start_ns) as window_ns,
    sum(o.end_ns - o.start_ns) filter (where o.name = 'Computing') as compute_ns,
    sum(o.end_ns - o.start_ns) filter (where o.name = 'Communication') as communication_ns,
    sum(o.end_ns - o.start_ns) filter (where o.name = 'Communication(Not Overlapped)') as exposed_ns,
    sum(o.end_ns - o.start_ns) filter (where o.name = 'Free') as idle_ns,
  from overlap_stepped as o
  left join rank_devices as r using (run, role, rank_id, capture)
  group by o.run, o.role, o.rank_id, o.capture, o.step
),

every_activity as (
  select
    d.run, d.role, d.rank_id, d.capture, d.step, coalesce(d.device, r.device) as device, d.kind,
    d.start_ns as s, d.end_ns as e,
    coalesce(starts_with(coalesce(d.device, r.device), 'NPU'), false) as is_ascend,
  from device_ops as d
  left join rank_devices as r
    on d.run = r.run and d.role = r.role and d.rank_id = r.rank_id and d.capture = r.capture
),

windows as (
  select * from internal.device_windows
),

window_lengths as (
  select run, role, rank_id, capture, step, device, sum(end_ns - start_ns) as window_ns
  from windows
  group by all
),

-- Ascend: each task in the step that launched it, as the profiler counts it. Elsewhere:
-- every activity of the device in each step's window, cut to it, whichever step launched it.
activity as (
  select * from every_activity where is_ascend
  union all
  select
    a.run, a.role, a.rank_id, a.capture, w.step, a.device, a.kind,
    greatest(a.s, w.start_ns) as s, least(a.e, w.end_ns) as e, a.is_ascend,
  from every_activity as a
  join windows as w
    on a.run = w.run and a.role = w.role and a.rank_id = w.rank_id and a.capture = w.capture
    and a.device is not distinct from w.device and a.s < w.end_ns and a.e > w.start_ns
  where not a.is_ascend
),

-- Each activity under the sets it belongs to: busy (all), compute, communication, memcpy,
-- and compute_or_communication (for the intersection: |A n B| = |A| + |B| - |A u B|).
labelled as (
  select
    * exclude (kind),
    unnest(['busy'] || case kind
      when 'compute' then ['compute', 'compute_or_communication']
      when 'communication' then ['communication', 'compute_or_communication']
      when 'memcpy' then ['memcpy']
      else [] end) as label,
  from activity
  where e > s
),

-- Gaps and islands: an activity starts a new island when it starts after every earlier one ended.
islands as (
  select
    *,
    sum(starts_island::integer) over (
      partition by run, role, rank_id, capture, step, device, label order by s, e rows unbounded preceding
    ) as island,
  from (
    select
      *,
      coalesce(s > max(e) over (
        partition by run, role, rank_id, capture, step, device, label
        order by s, e rows between unbounded preceding and 1 preceding
      ), true) as starts_island,
    from labelled
  )
),

unions as (
  select run, role, rank_id, capture, step, device, label, sum(island_ns) as union_ns,
    min(island_start) as first_ns, max(island_end) as last_ns,
    bool_or(is_ascend) as is_ascend,
  from (
    select run, role, rank_id, capture, step, device, label, island, max(e) - min(s) as island_ns,
      min(s) as island_start, max(e) as island_end,
      bool_or(is_ascend) as is_ascend,
    from islands
    group by all
  )
  group by all
),

intervals as (
  select
    u.run, u.role, u.rank_id, u.capture, u.step, u.device,
    case
      when bool_or(is_ascend) then max(last_ns) filter (where label = 'compute_or_communication')
                                 - min(first_ns) filter (where label = 'compute_or_communication')
      else any_value(wl.window_ns)
    end as window_ns,
    bool_or(is_ascend) as is_ascend,
    coalesce(sum(union_ns) filter (where label = 'compute'), 0) as compute_ns,
    coalesce(sum(union_ns) filter (where label = 'communication'), 0) as communication_ns,
    coalesce(sum(union_ns) filter (where label = 'compute_or_communication'), 0) as either_ns,
    coalesce(sum(union_ns) filter (where label = 'memcpy'), 0) as memcpy_ns,
    coalesce(sum(union_ns) filter (where label = 'busy'), 0) as busy_ns,
  from unions as u
  left join window_lengths as wl
    on u.run = wl.run and u.role = wl.role and u.rank_id = wl.rank_id and u.capture = wl.capture
    and u.step is not distinct from wl.step and u.device is not distinct from wl.device
  group by u.run, u.role, u.rank_id, u.capture, u.step, u.device
),

memcpy_by_step as (
  select run, role, rank_id, capture, step, memcpy_ns from intervals
),

-- The profiler's own step figures, for an Ascend capture without Overlap Analysis rows.
step_trace as (
  select
    s.run, s.role, s.rank_id, s.capture, s.step::integer as step,
    any_value(s.computing_ns) as compute_ns,
    any_value(coalesce(s.communication_ns, s.communication_not_overlapped_ns + s.overlapped_ns)) as communication_ns,
    any_value(s.communication_not_overlapped_ns) as exposed_ns,
    any_value(s.free_ns) as idle_ns,
  from step_times as s
  anti join overlap_captures as o on s.run = o.run and s.capture = o.capture
  where s.computing_ns is not null and s.communication_not_overlapped_ns is not null and s.free_ns is not null
  group by s.run, s.role, s.rank_id, s.capture, s.step
),

final as (
  select
    a.run, a.role, a.rank_id, a.capture, a.step, a.device, a.window_ns::bigint as window_ns,
    coalesce(a.compute_ns, 0)::bigint as compute_ns,
    coalesce(a.communication_ns, 0)::bigint as communication_ns,
    (coalesce(a.communication_ns, 0) - coalesce(a.exposed_ns, 0))::bigint as overlapped_ns,
    coalesce(a.exposed_ns, 0)::bigint as exposed_communication_ns,
    coalesce(m.memcpy_ns, 0)::bigint as memcpy_ns,
    coalesce(a.idle_ns, 0)::bigint as idle_ns,
    'overlap_analysis' as method,
  from ascend as a
  left join memcpy_by_step as m
    on a.run = m.run and a.role = m.role and a.rank_id = m.rank_id and a.capture = m.capture
    and (a.step = m.step or (a.step is null and m.step is null))
  union all
  select
    t.run, t.role, t.rank_id, t.capture, t.step, r.device,
    (t.compute_ns + t.exposed_ns + t.idle_ns)::bigint as window_ns,
    t.compute_ns::bigint, t.communication_ns::bigint,
    (t.communication_ns - t.exposed_ns)::bigint as overlapped_ns,
    t.exposed_ns::bigint as exposed_communication_ns,
    coalesce(m.memcpy_ns, 0)::bigint as memcpy_ns,
    t.idle_ns::bigint,
    'step_trace_time' as method,
  from step_trace as t
  left join rank_devices as r
    on t.run = r.run and t.role = r.role and t.rank_id = r.rank_id and t.capture = r.capture
  left join memcpy_by_step as m
    on t.run = m.run and t.role = m.role and t.rank_id = m.rank_id and t.capture = m.capture
    and (t.step = m.step or (t.step is null and m.step is null))
  union all
  select
    i.run, i.role, i.rank_id, i.capture, i.step, i.device, i.window_ns::bigint,
    i.compute_ns::bigint, i.communication_ns::bigint,
    (i.compute_ns + i.communication_ns - i.either_ns)::bigint as overlapped_ns,
    (i.either_ns - i.compute_ns)::bigint as exposed_communication_ns,
    i.memcpy_ns::bigint,
    (i.window_ns - case when i.is_ascend then i.either_ns else i.busy_ns end)::bigint as idle_ns,
    case when i.is_ascend then 'ascend_tasks' else 'intervals' end as method,
  from intervals as i
  anti join overlap_captures as o on i.run = o.run and i.capture = o.capture
  anti join step_trace as t
    on i.run = t.run and i.capture = t.capture and i.rank_id = t.rank_id
    and (i.step = t.step or (i.step is null and t.step is null))
  where i.window_ns is not null  -- an Ascend step with no kernel nor collective (a profiler marker alone)
)

select * from final
