-- One row per (run, role, rank_id, capture, device): the peak of live bytes from
-- memory_timeline (its rows as stored at ingest) and when it was first reached, beside the
-- allocator's own reported peak (which includes memory the profiler could not attribute
-- to an operator). The allocator figures are the framework allocator's (PyTorch's, or
-- torch_npu's PTA); GE's cann::* totals are a separate pool and are not mixed in. A memory
-- snapshot records no totals: its allocator peak is the peak of memory_timeline's
-- allocator_live_bytes, what the allocator held with the blocks allocated before recording
-- began (its peak_live_bytes counts only the blocks its trace allocated).
--
-- A snapshot device whose trace allocates nothing (it holds only frees, or no entry, or
-- the snapshot has no device_traces at all, as an old list-format snapshot) has no timeline
-- rows, yet its segments say what the allocator held; it gets its row from them. The
-- figure is the allocator's held bytes, as for every snapshot (memory that is allocated,
-- not what the allocator reserves, so ranks compare on what their programs used): the
-- blocks the segments hold at snapshot time (states active_allocated and
-- active_pending_free; the sum of the segments' allocated and pending-free blocks) plus
-- the blocks the trace freed that were allocated before it began. With no allocation in
-- the trace, held bytes only fall while it runs, so that sum is what the allocator held
-- when recording began, its highest (with no trace at all, what it holds at snapshot
-- time). No trace entry marks that moment: allocator_peak_at_ns and peak_at_ns are NULL,
-- and peak_live_bytes is 0 (the trace allocated no block). For every snapshot
-- allocator_reserved_peak_bytes is what its segments reserve at snapshot time (the sum of
-- their total_size): the snapshot keeps no reserved total over time, so it is the lowest
-- the peak can be.
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
  -- Highest live bytes of attributable blocks (for a memory snapshot, of the blocks its trace allocated: 0 where it allocated none).
  peak_live_bytes,
  -- First time live bytes reached the peak, ns since the epoch; NULL for a snapshot device whose trace allocated nothing.
  peak_at_ns,
  -- Highest total allocated bytes the framework allocator reported (PyTorch's or PTA; not GE's); for a memory snapshot, the highest allocator_live_bytes, or where its trace allocated nothing the bytes its segments hold plus those its trace freed.
  allocator_peak_bytes,
  -- First time the allocator reported that total, ns since the epoch (a trace position where clock is 'sequence'); NULL for a snapshot device whose trace allocated nothing.
  allocator_peak_at_ns,
  -- Highest total reserved bytes the framework allocator reported (PyTorch's or PTA; not GE's); for a memory snapshot, the bytes its segments reserve at snapshot time (the sum of their total_size).
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

snapshot_reserved as (
  select run, role, rank_id, capture, device, sum(total_size_bytes)::bigint as reserved_bytes,
  from snapshot_segments
  group by run, role, rank_id, capture, device
),

snapshot_held as (
  select run, role, rank_id, capture, device, sum(size_bytes)::bigint as held_bytes,
  from snapshot_blocks
  where internal.snapshot_held(state)
  group by run, role, rank_id, capture, device
),

freed_before_recording as (
  -- Blocks allocated before the trace began and freed while it ran, and the trace's clock
  -- (a trace that allocates nothing holds no other blocks).
  select
    run, role, rank_id, capture, device,
    sum(size_bytes) filter (where release_seq is not null)::bigint as freed_bytes,
    any_value(clock) as clock,
  from snapshot_trace_blocks
  where alloc_seq is null
  group by run, role, rank_id, capture, device
),

snapshot_devices as (
  select
    r.run, r.role, r.rank_id, r.capture, r.device, r.reserved_bytes, h.held_bytes, f.freed_bytes, f.clock,
  from snapshot_reserved as r
  left join snapshot_held as h using (run, role, rank_id, capture, device)
  left join freed_before_recording as f using (run, role, rank_id, capture, device)
),

keyed as (
  select *, true as traced, null::bigint as reserved_bytes, null::bigint as held_bytes, null::bigint as freed_bytes,
    null::varchar as freed_clock,
  from peaks
  union all
  select
    run, role, rank_id, capture, device, null, null, null, null, null, null, false,
    reserved_bytes, held_bytes, freed_bytes, clock,
  from snapshot_devices
),

all_peaks as (
  -- A device's peaks row beside its snapshot's, in one group: no anti join, whose second
  -- scan of the timeline a query's filter (on run, say) would not reach. Keys match as a
  -- join's do: one with a NULL part is never paired across the two.
  select
    run, role, rank_id, capture, device,
    bool_or(traced) as traced,
    any_value(peak_live_bytes) as peak_live_bytes, any_value(peak_at_ns) as peak_at_ns,
    any_value(allocator_peak_bytes) as allocator_peak_bytes, any_value(allocator_peak_at_ns) as allocator_peak_at_ns,
    any_value(allocator_reserved_peak_bytes) as traced_reserved_bytes, any_value(clock) as traced_clock,
    any_value(reserved_bytes) as reserved_bytes, any_value(held_bytes) as held_bytes,
    any_value(freed_bytes) as freed_bytes, any_value(freed_clock) as freed_clock,
  from keyed
  group by run, role, rank_id, capture, device,
    case when run is null or role is null or rank_id is null or capture is null or device is null then traced end
),

final as (
  -- A snapshot device whose trace allocated nothing (no timeline rows): from its segments.
  select
    run, role, rank_id, capture, device,
    case when traced then peak_live_bytes else 0 end as peak_live_bytes,
    peak_at_ns,
    case when traced then allocator_peak_bytes else (coalesce(held_bytes, 0) + coalesce(freed_bytes, 0))::bigint end
      as allocator_peak_bytes,
    allocator_peak_at_ns,
    case when traced then coalesce(traced_reserved_bytes, reserved_bytes) else reserved_bytes end
      as allocator_reserved_peak_bytes,
    round(case when traced then peak_live_bytes else 0 end / 1048576.0, 3) as peak_live_mb,
    round(case when traced then allocator_peak_bytes else coalesce(held_bytes, 0) + coalesce(freed_bytes, 0) end
      / 1048576.0, 3)
      as allocator_peak_mb,
    case when traced then traced_clock else coalesce(freed_clock, 'sequence') end as clock,
  from all_peaks
)

select * from final
