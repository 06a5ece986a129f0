-- One row per (run, role, rank_id, name, kind): how often a kernel, collective or copy ran
-- on the rank's devices and how much time it took; the table to open first when a step is
-- slow. share is the row's total_ns over the rank's device time: the summed time of its
-- compute, communication, memcpy and memset activity (kind 'other', the waits, event
-- records and profiler markers, has no share: a wait's length is not work).
-- depends: internal.left_out_captures
create or replace view kernel_stats (
  -- Run name.
  run,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Kernel, collective or task name (device_ops.name).
  name,
  -- compute, communication, memcpy, memset or other (device_ops.kind).
  kind,
  -- Times it ran.
  count,
  -- Summed duration, ns.
  total_ns,
  -- total_ns / count, rounded down, ns.
  mean_ns,
  -- Longest single run, ns.
  max_ns,
  -- total_ns over the rank's summed compute, communication, memcpy and memset time (0..1); NULL for kind other.
  share
) as
with ops as (
  select run, role, rank_id, name, kind, end_ns - start_ns as dur_ns
  from device_ops
  anti join internal.left_out_captures using (run, capture)
),

per_name as (
  select
    run, role, rank_id, name, kind,
    count(*) as count,
    sum(dur_ns)::bigint as total_ns,
    (sum(dur_ns) // count(*))::bigint as mean_ns,
    max(dur_ns) as max_ns,
  from ops
  group by run, role, rank_id, name, kind
),

final as (
  select
    *,
    case
      when kind = 'other' then null
      else total_ns / nullif(sum(total_ns) filter (where kind <> 'other') over (partition by run, role, rank_id), 0)
    end as share,
  from per_name
)

select * from final
