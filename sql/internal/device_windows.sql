-- Each step's window on a device, as pieces that never overlap, so no instant of the
-- device's time counts in two steps. Private helper of device_time (its method
-- 'intervals') and device_idle.
--
-- A step's own span is its activity's (the device_ops it launched) first start to last
-- end. Where the device runs behind its host, step n's last kernels still run when step
-- n + 1's first one starts (on another stream, or a step later), so the spans overlap.
-- The device's time is cut where each step's first activity starts: an instant belongs to
-- the step whose first activity started most recently before it, as long as some step's
-- span still covers it. So step n's window runs from its first start to the next step's
-- first start, or to the latest end of the spans begun so far where that comes first
-- (the device then idles until the next step: between steps, in no window). The windows
-- are the union of the steps' spans, cut in pieces. Activity launched outside every step
-- (step NULL) has the parts of its own span that no step's window holds.
create or replace view internal.device_windows as
with activity as (
  select d.run, d.role, d.rank_id, d.capture, d.step, coalesce(d.device, r.device) as device,
    d.start_ns as s, d.end_ns as e,
  from device_ops as d
  left join (select run, role, rank_id, capture, any_value(device) as device from ranks group by all) as r
    on d.run = r.run and d.role = r.role and d.rank_id = r.rank_id and d.capture = r.capture
  where d.end_ns > d.start_ns
),

spans as (
  select run, role, rank_id, capture, device, step, min(s) as first_ns, max(e) as last_ns
  from activity
  group by all
),

step_windows as (
  select
    run, role, rank_id, capture, device, step, first_ns as start_ns,
    least(max(last_ns) over so_far, coalesce(lead(first_ns) over so_far, max(last_ns) over so_far)) as end_ns,
  from spans
  where step is not null
  window so_far as (
    partition by run, role, rank_id, capture, device order by first_ns, step rows unbounded preceding
  )
),

-- The device's time outside every step window: before each window (after the previous
-- one), and after the last. NULL bounds are open.
outside as (
  select run, role, rank_id, capture, device,
    lag(end_ns) over (partition by run, role, rank_id, capture, device order by start_ns, step) as start_ns,
    start_ns as end_ns,
  from step_windows
  union all
  select run, role, rank_id, capture, device, max(end_ns) as start_ns, null as end_ns
  from step_windows
  group by all
  union all
  select run, role, rank_id, capture, device, null as start_ns, null as end_ns
  from spans
  group by all
  having count(step) = 0
),

unstepped_windows as (
  select s.run, s.role, s.rank_id, s.capture, s.device, s.step,
    greatest(s.first_ns, coalesce(o.start_ns, s.first_ns)) as start_ns,
    least(s.last_ns, coalesce(o.end_ns, s.last_ns)) as end_ns,
  from spans as s
  join outside as o
    on s.run = o.run and s.role = o.role and s.rank_id = o.rank_id and s.capture = o.capture
    and s.device is not distinct from o.device
  where s.step is null
)

select * from step_windows where end_ns > start_ns
union all
select * from unstepped_windows where end_ns > start_ns
