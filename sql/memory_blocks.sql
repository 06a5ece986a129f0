-- One row per allocated block of device memory, from both sources: Ascend
-- operator_memory.csv allocation rows as they are (release rows, with a negative size,
-- are not blocks), and PyTorch "[memory]" events paired alloc -> next free of the same
-- (capture, device, addr) in event order. A PyTorch allocation with no later free is
-- unreleased (release_ns NULL); a free with no earlier allocation is counted in
-- torch_memory_orphan_frees instead.
-- depends: memory_alloc_stack, _torch_memory_pairs
create or replace view memory_blocks (
  -- Run name.
  run,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Rank dir or trace file the block came from.
  capture,
  -- Device, e.g. NPU:0 or cuda:0.
  device,
  -- Where the block was recorded: 'ascend' (operator_memory.csv) or 'torch' ([memory] events).
  source,
  -- Provenance: the CSV's 1-based data row (ascend) or the memory event's index (torch).
  origin_row,
  -- Operator that allocated the block (torch: innermost enclosing cpu_op).
  name,
  -- Allocation time, ns since the epoch.
  alloc_ns,
  -- Release time, ns since the epoch; NULL when never released within the capture.
  release_ns,
  -- Block size in bytes.
  size_bytes,
  -- Call stack of the allocating op (call_stacks.stack_id); NULL when unknown.
  stack_id,
  -- First frame of that call stack.
  call_stack_top,
  -- Allocator's total allocated bytes right after the allocation, when recorded.
  allocated_after_alloc_bytes,
  -- Allocator's total reserved bytes right after the allocation, when recorded.
  reserved_after_alloc_bytes,
  -- Allocator's total allocated bytes right after the release, when recorded.
  allocated_after_release_bytes,
  -- Allocator's total reserved bytes right after the release, when recorded.
  reserved_after_release_bytes
) as
with ascend_allocations as (
  select * from memory_alloc_stack
),

ascend_blocks as (
  select
    run, role, rank_id, capture, device, 'ascend' as source, source_row as origin_row,
    name, alloc_ns, release_ns, size_bytes, stack_id, call_stack_top,
    alloc_total_allocated_bytes as allocated_after_alloc_bytes,
    alloc_total_reserved_bytes as reserved_after_alloc_bytes,
    release_total_allocated_bytes as allocated_after_release_bytes,
    release_total_reserved_bytes as reserved_after_release_bytes,
  from ascend_allocations
),

torch_pairs as (
  select * from _torch_memory_pairs
),

torch_blocks as (
  select
    p.run, p.role, p.rank_id, p.capture, p.device, 'torch' as source, p.event_index as origin_row,
    p.op_name as name, p.ts_ns as alloc_ns,
    case when p.next_bytes < 0 then p.next_ts_ns end as release_ns,
    p.bytes as size_bytes, p.stack_id, s.top_frame as call_stack_top,
    p.total_allocated_bytes, p.total_reserved_bytes,
    case when p.next_bytes < 0 then p.next_total_allocated_bytes end,
    case when p.next_bytes < 0 then p.next_total_reserved_bytes end,
  from torch_pairs as p
  left join call_stacks as s on p.stack_id = s.stack_id
  where p.bytes > 0
),

final as (
  select * from ascend_blocks
  union all
  select * from torch_blocks
)

select * from final
