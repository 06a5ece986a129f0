-- One row per (run, role, rank_id, capture, step, device): why the device sat idle in the
-- step's window, HTA's idle time breakdown on the device_time windows.
--
-- The gaps are those of device_time: the device's activity, whichever step launched it,
-- is merged into busy stretches (the union over streams, every kind), and a gap is the time
-- between one stretch's end and the next one's start: the device ran nothing. Each gap
-- lies in the windows of internal.device_windows (the steps' windows, which never overlap;
-- a gap across two windows is split between them; one between two steps' windows is in
-- none). So a kernel of step n still running in step n + 1's window is busy time there,
-- never idle. Each gap is charged whole to one cause, by the activity that ends it (of
-- those starting at its end, the earliest launched):
--   host_wait: its launch on the CPU came after the gap began: the device had run dry
--     because the host had not launched the next work yet (host-bound);
--   kernel_wait: it was launched before the gap began and the gap is shorter than
--     [thresholds] kernel_wait_ns (default 30 us, as HTA's idle time breakdown: its
--     consecutive_kernel_delay is 30 us): the overhead of starting back-to-back kernels;
--   other_wait: it was launched before the gap began and waited longer: on a dependency,
--     an event or a sync (a stream waiting on another), or a gap whose next activity has no
--     launch the trace links (unlinked_ns says how much; Ascend tasks mostly).
-- HTA classifies the gaps on each stream apart; here they are the device's, so a gap on
-- one stream that another stream fills is busy, as device_time counts it. For method
-- 'intervals' (Kineto) idle_ns equals device_time.idle_ns and host_wait_ns + kernel_wait_ns
-- + other_wait_ns = idle_ns; on Ascend device_time takes the profiler's own figures, which
-- may differ from these gaps.
-- depends: internal.device_windows
create or replace view device_idle (
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
  -- Device, e.g. cuda:3, NPU:0.
  device,
  -- Idle gaps in the step's window (a gap split between two windows counts in each).
  gaps,
  -- Their total, ns: the step's window less its busy time.
  idle_ns,
  -- Gaps the host had not launched the next work for yet (its launch came after the gap began), ns.
  host_wait_ns,
  -- Gaps shorter than [thresholds] kernel_wait_ns (default 30 us, as HTA) before work launched in time: launch overhead, ns.
  kernel_wait_ns,
  -- The other gaps (work launched in time that waited on a dependency or a sync, or no launch linked), ns.
  other_wait_ns,
  -- Of other_wait_ns, the gaps whose next activity has no linked launch, ns.
  unlinked_ns,
  -- host_wait_ns / idle_ns; NULL when the step never idled.
  host_wait_share
) as
with activity as (
  select
    d.run, d.role, d.rank_id, d.capture, d.step, coalesce(d.device, r.device) as device,
    d.start_ns as s, d.end_ns as e, d.launch_ts_ns,
  from device_ops as d
  left join (select run, role, rank_id, capture, any_value(device) as device from ranks group by all) as r
    on d.run = r.run and d.role = r.role and d.rank_id = r.rank_id and d.capture = r.capture
  where d.end_ns > d.start_ns
),

threshold as (
  select coalesce(
    (select try_cast(max(value) as bigint) from internal.settings where name = 'kernel_wait_ns'), 30000
  ) as threshold_ns
),

-- Each activity beside the end of everything before it on the device: where it starts
-- later, a gap ends at it. At one start instant the earliest launched comes first.
ordered as (
  select
    *,
    max(e) over (
      partition by run, role, rank_id, capture, device
      order by s, launch_ts_ns nulls last, e rows between unbounded preceding and 1 preceding
    ) as busy_until,
  from activity
),

every_gap as (
  select
    run, role, rank_id, capture, device, busy_until as gap_start_ns, s as gap_end_ns,
    case
      when launch_ts_ns is null then 'unlinked'
      when launch_ts_ns > busy_until then 'host_wait'
      when s - busy_until < (select threshold_ns from threshold) then 'kernel_wait'
      else 'other_wait'
    end as cause,
  from ordered
  where s > busy_until
),

windows as (
  select * from internal.device_windows
),

-- Each gap in the windows it crosses, cut to them.
gaps as (
  select w.run, w.role, w.rank_id, w.capture, w.step, w.device,
    least(g.gap_end_ns, w.end_ns) - greatest(g.gap_start_ns, w.start_ns) as gap_ns, g.cause,
  from every_gap as g
  join windows as w
    on g.run = w.run and g.role = w.role and g.rank_id = w.rank_id and g.capture = w.capture
    and g.device is not distinct from w.device and g.gap_start_ns < w.end_ns and g.gap_end_ns > w.start_ns
),

steps as (
  select distinct run, role, rank_id, capture, step, device from windows
),

final as (
  select
    t.run, t.role, t.rank_id, t.capture, t.step, t.device,
    count(g.gap_ns) as gaps,
    coalesce(sum(g.gap_ns), 0)::bigint as idle_ns,
    coalesce(sum(g.gap_ns) filter (where g.cause = 'host_wait'), 0)::bigint as host_wait_ns,
    coalesce(sum(g.gap_ns) filter (where g.cause = 'kernel_wait'), 0)::bigint as kernel_wait_ns,
    coalesce(sum(g.gap_ns) filter (where g.cause in ('other_wait', 'unlinked')), 0)::bigint as other_wait_ns,
    coalesce(sum(g.gap_ns) filter (where g.cause = 'unlinked'), 0)::bigint as unlinked_ns,
  from steps as t
  left join gaps as g
    on t.run = g.run and t.role = g.role and t.rank_id = g.rank_id and t.capture = g.capture
    and (t.step = g.step or (t.step is null and g.step is null))
    and (t.device = g.device or (t.device is null and g.device is null))
  group by all
)

select *, host_wait_ns / nullif(idle_ns, 0) as host_wait_share from final
