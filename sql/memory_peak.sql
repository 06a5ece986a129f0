-- One row per (run, role, rank_id, capture, device): the peak of live bytes from
-- memory_timeline and when it was first reached, beside the allocator's own reported peak
-- (which includes memory the profiler could not attribute to an operator).
-- depends: memory_timeline
create or replace view memory_peak (
  -- Run name.
  run,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Rank dir or trace file.
  capture,
  -- Device, e.g. NPU:0 or cuda:0.
  device,
  -- Highest live bytes of attributable blocks.
  peak_live_bytes,
  -- First time live bytes reached the peak, ns since the epoch.
  peak_at_ns,
  -- Highest total allocated bytes the allocator reported.
  allocator_peak_bytes,
  -- First time the allocator reported that total, ns since the epoch.
  allocator_peak_at_ns,
  -- Highest total reserved bytes the allocator reported.
  allocator_reserved_peak_bytes,
  -- peak_live_bytes in MiB, for people.
  peak_live_mb,
  -- allocator_peak_bytes in MiB, for people.
  allocator_peak_mb
) as
with timeline as (
  select * from memory_timeline
),

live_peak as (
  select run, role, rank_id, capture, device, live_bytes as peak_live_bytes, ts_ns as peak_at_ns
  from timeline
  qualify row_number() over (
    partition by run, role, rank_id, capture, device order by live_bytes desc, ts_ns, delta_bytes > 0, origin_row
  ) = 1
),

allocator_peak as (
  select
    run, role, rank_id, capture, device,
    allocator_allocated_bytes as allocator_peak_bytes,
    ts_ns as allocator_peak_at_ns,
    max(allocator_reserved_bytes) over (partition by run, role, rank_id, capture, device)
      as allocator_reserved_peak_bytes,
  from timeline
  where allocator_allocated_bytes is not null
  qualify row_number() over (
    partition by run, role, rank_id, capture, device order by allocator_allocated_bytes desc, ts_ns
  ) = 1
),

final as (
  select
    l.*,
    a.allocator_peak_bytes, a.allocator_peak_at_ns, a.allocator_reserved_peak_bytes,
    round(l.peak_live_bytes / 1048576.0, 3) as peak_live_mb,
    round(a.allocator_peak_bytes / 1048576.0, 3) as allocator_peak_mb,
  from live_peak as l
  left join allocator_peak as a using (run, role, rank_id, capture, device)
)

select * from final
