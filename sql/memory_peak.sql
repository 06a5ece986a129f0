-- One row per (run, role, rank_id, capture, device): the peak of live bytes from
-- memory_timeline (its rows as stored at ingest) and when it was first reached, beside the
-- allocator's own reported peak (which includes memory the profiler could not attribute
-- to an operator). The allocator figures are the framework allocator's (PyTorch's, or
-- torch_npu's PTA); GE's cann::* totals are a separate pool and are not mixed in. A memory
-- snapshot records no totals: its allocator peak is the peak of memory_timeline's
-- allocator_live_bytes, what the allocator held with the blocks allocated before recording
-- began (its peak_live_bytes counts only the blocks its trace allocated).
-- depends: internal.memory_rules
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
  -- Highest total allocated bytes the framework allocator reported (PyTorch's or PTA; not GE's); for a memory snapshot, the highest allocator_live_bytes.
  allocator_peak_bytes,
  -- First time the allocator reported that total, ns since the epoch (a trace position where clock is 'sequence').
  allocator_peak_at_ns,
  -- Highest total reserved bytes the framework allocator reported (PyTorch's or PTA; not GE's).
  allocator_reserved_peak_bytes,
  -- peak_live_bytes in MiB, for people.
  peak_live_mb,
  -- allocator_peak_bytes in MiB, for people.
  allocator_peak_mb,
  -- Clock of peak_at_ns: 'epoch', or 'sequence' (a memory snapshot's trace position, no time).
  clock
) as
with timeline as (
  select
    *,
    -- What the framework allocator held after the event, by its own account.
    case
      when source = 'snapshot' then allocator_live_bytes
      when allocator is distinct from 'GE' then allocator_allocated_bytes
    end as allocator_held_bytes,
  from internal.memory_timeline_rows
),

peaks as (
  -- One pass, no sort: max_by keeps the first event (in internal.memory_event_order: time,
  -- releases first, then origin_row) that reached the highest value.
  select
    run, role, rank_id, capture, device,
    max_by(ts_ns, [live_bytes::hugeint, -internal.memory_event_order(ts_ns, event, origin_row)]) as peak_at_ns,
    max(live_bytes) as peak_live_bytes,
    max(allocator_held_bytes) as allocator_peak_bytes,
    max_by(ts_ns, [allocator_held_bytes::hugeint, -internal.memory_event_order(ts_ns, event, origin_row)])
      filter (where allocator_held_bytes is not null) as allocator_peak_at_ns,
    max(allocator_reserved_bytes) filter (where allocator is distinct from 'GE') as allocator_reserved_peak_bytes,
    coalesce(any_value(clock), 'epoch') as clock,
  from timeline
  group by run, role, rank_id, capture, device
),

final as (
  select
    run, role, rank_id, capture, device, peak_live_bytes, peak_at_ns,
    allocator_peak_bytes, allocator_peak_at_ns, allocator_reserved_peak_bytes,
    round(peak_live_bytes / 1048576.0, 3) as peak_live_mb,
    round(allocator_peak_bytes / 1048576.0, 3) as allocator_peak_mb,
    clock,
  from peaks
)

select * from final
