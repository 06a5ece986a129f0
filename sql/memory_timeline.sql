-- One row per allocation or release event of a block, per (run, role, rank_id, capture,
-- device), with the live bytes after it: +size at alloc, -size at release, summed in time
-- order. At equal times releases apply first (a block freed and another allocated in the
-- same ns never count together). The allocator's own totals ride along where recorded.
-- depends: memory_blocks
create or replace view memory_timeline (
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
  -- 'ascend' or 'torch'.
  source,
  -- Time of the event, ns since the epoch.
  ts_ns,
  -- 'alloc' or 'release'.
  event,
  -- +size at alloc, -size at release, in bytes.
  delta_bytes,
  -- Bytes of blocks live right after this event (running sum of delta_bytes).
  live_bytes,
  -- Allocator's total allocated bytes after the event, as the profiler recorded it.
  allocator_allocated_bytes,
  -- Allocator's total reserved bytes after the event, as the profiler recorded it.
  allocator_reserved_bytes,
  -- Operator of the block.
  name,
  -- Size of the block in bytes.
  size_bytes,
  -- Call stack of the block's allocation.
  stack_id,
  -- First frame of that call stack.
  call_stack_top,
  -- Provenance of the block (memory_blocks.origin_row).
  origin_row
) as
with blocks as (
  select * from memory_blocks
),

events as (
  -- One scan of the blocks, two rows per released block: its alloc and its release.
  select
    b.run, b.role, b.rank_id, b.capture, b.device, b.source,
    if(e.event = 'alloc', b.alloc_ns, b.release_ns) as ts_ns,
    e.event,
    if(e.event = 'alloc', b.size_bytes, -b.size_bytes) as delta_bytes,
    if(e.event = 'alloc', b.allocated_after_alloc_bytes, b.allocated_after_release_bytes)
      as allocator_allocated_bytes,
    if(e.event = 'alloc', b.reserved_after_alloc_bytes, b.reserved_after_release_bytes)
      as allocator_reserved_bytes,
    b.name, b.size_bytes, b.stack_id, b.call_stack_top, b.origin_row,
  from blocks as b
  cross join (values ('alloc'), ('release')) as e (event)
  where if(e.event = 'alloc', b.alloc_ns, b.release_ns) is not null
),

final as (
  select
    run, role, rank_id, capture, device, source, ts_ns, event, delta_bytes,
    -- BIGINT, not the HUGEINT sum() gives: BI tools and pandas read BIGINT.
    (sum(delta_bytes) over (
      partition by run, role, rank_id, capture, device
      order by ts_ns, delta_bytes > 0, origin_row, source
      rows between unbounded preceding and current row
    ))::bigint as live_bytes,
    allocator_allocated_bytes, allocator_reserved_bytes,
    name, size_bytes, stack_id, call_stack_top, origin_row,
  from events
)

select * from final
