-- One row per allocated block of device memory, from every source: Ascend
-- operator_memory.csv allocation rows as they are (release rows, with a negative size,
-- are not blocks), and PyTorch "[memory]" events with an address paired alloc -> the next
-- event at the same (capture, device, addr) in time order across threads
-- (internal.torch_memory_pairs, paired once at ingest). A PyTorch allocation followed by another
-- allocation at its address ends there (release_inferred); one with no later event is
-- unreleased (release_ns NULL); a free with no earlier allocation is counted in
-- torch_memory_orphan_frees instead. Stacks follow memory_alloc_stack's rules for both
-- sources (for PyTorch the matched op is the innermost cpu_op enclosing the event on its
-- thread). PyTorch memory snapshots (source 'snapshot') add every block their allocator
-- held while the trace ran (internal.snapshot_held_blocks): the blocks of their device_traces, each
-- alloc paired with its free_completed or ended by the next alloc at its address, with the
-- stack the allocator recorded ('allocation'); and the blocks allocated before recording
-- began (allocated_before_recording, alloc_ns NULL): those the trace frees, and those the
-- segments still hold at snapshot time, with the segments' stack where they carry one.
-- Where the snapshot's entries carry no time, clock is 'sequence' and alloc_ns /
-- release_ns hold the entries' positions in the trace: they order that capture's events
-- and are no time.
-- depends: memory_alloc_stack, internal.stack_frames, internal.snapshot_held_blocks, internal.memory_rules
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
  -- Where the block was recorded: 'ascend' (operator_memory.csv), 'torch' ([memory] events) or 'snapshot'.
  source,
  -- Provenance: the CSV's 1-based data row (ascend), the memory event's index (torch), the alloc entry's position in its device trace (snapshot; NULL for a block allocated before recording).
  origin_row,
  -- Operator that allocated the block (torch: innermost enclosing cpu_op).
  name,
  -- Allocation time, ns since the epoch; NULL for a snapshot block allocated before recording began.
  alloc_ns,
  -- Release time, ns since the epoch; NULL when never released within the capture.
  release_ns,
  -- Block size in bytes.
  size_bytes,
  -- Attributed call stack of the allocation (call_stacks.stack_id); NULL when unknown.
  stack_id,
  -- Innermost Python frame of that call stack (native C/C++ frames never stand for it).
  call_stack_top,
  -- Allocator's total allocated bytes right after the allocation, when recorded.
  alloc_total_allocated_bytes,
  -- Allocator's total reserved bytes right after the allocation, when recorded.
  alloc_total_reserved_bytes,
  -- Allocator's total allocated bytes right after the release, when recorded.
  release_total_allocated_bytes,
  -- Allocator's total reserved bytes right after the release, when recorded.
  release_total_reserved_bytes,
  -- The allocator that made the block: 'PTA' (torch_npu), 'GE' (cann::* rows), 'torch' or 'snapshot'.
  allocator,
  -- True when the release was not recorded but inferred: another allocation reused the address.
  release_inferred,
  -- Which rule gave the stack: 'op', 'forward_op', 'enclosing_op' (see memory_alloc_stack), 'allocation' (recorded by the allocator: snapshots) or NULL.
  stack_source,
  -- Innermost Python frame of the stack outside library code ([stacks] in warehouse.toml).
  user_frame,
  -- Clock of alloc_ns and release_ns: 'epoch' (ns since 1970 UTC), or 'sequence' (positions
  -- in a memory snapshot's trace that records no time).
  clock,
  -- True for a memory snapshot's block allocated before its trace began recording (the allocator held it; the trace has no alloc for it).
  allocated_before_recording
) as
with ascend_allocations as (
  select * from memory_alloc_stack
),

ascend_blocks as (
  select
    run, role, rank_id, capture, device, 'ascend' as source, source_row as origin_row,
    name, alloc_ns, release_ns, size_bytes, stack_id, call_stack_top,
    alloc_total_allocated_bytes, alloc_total_reserved_bytes,
    release_total_allocated_bytes, release_total_reserved_bytes,
    internal.ascend_allocator(name) as allocator,
    false as release_inferred,
    stack_source, user_frame, 'epoch' as clock, false as allocated_before_recording,
  from ascend_allocations
),

torch_blocks as (
  select
    b.run, b.role, b.rank_id, b.capture, b.device, 'torch' as source, b.origin_row,
    b.name, b.alloc_ns, b.release_ns, b.size_bytes, b.stack_id, f.top_frame as call_stack_top,
    b.alloc_total_allocated_bytes, b.alloc_total_reserved_bytes,
    b.release_total_allocated_bytes, b.release_total_reserved_bytes,
    'torch' as allocator, b.release_inferred, b.stack_source, f.user_frame, 'epoch' as clock,
    false as allocated_before_recording,
  from internal.torch_memory_blocks as b
  left join internal.stack_frames as f on b.stack_id = f.stack_id
),

snapshot_blocks as (
  select
    b.run, b.role, b.rank_id, b.capture, b.device, 'snapshot' as source, b.alloc_seq as origin_row,
    null::varchar as name, b.alloc_ns, b.release_ns, b.size_bytes, b.stack_id, f.top_frame as call_stack_top,
    null::bigint, null::bigint, null::bigint, null::bigint,
    'snapshot' as allocator, b.release_inferred,
    case when b.stack_id is not null then 'allocation' end as stack_source, f.user_frame, b.clock,
    b.allocated_before_recording,
  from internal.snapshot_held_blocks as b
  left join internal.stack_frames as f on b.stack_id = f.stack_id
),

final as (
  select * from ascend_blocks
  union all
  select * from torch_blocks
  union all
  select * from snapshot_blocks
)

select * from final
