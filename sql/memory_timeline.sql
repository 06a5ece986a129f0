-- One row per allocation or release event of a block, per (run, role, rank_id, capture,
-- device), with the live bytes after it: +size at alloc, -size at release, summed in time
-- order. At equal times releases apply first (a block freed and another allocated in the
-- same ns never count together). The allocator's own totals ride along where recorded:
-- they are the totals of the allocator that made the block (an Ascend device has two, the
-- PyTorch allocator 'PTA' and GE's for cann::* rows), so compare allocator_live_bytes, the
-- running sum of that allocator's blocks alone, with them: it never exceeds
-- allocator_allocated_bytes. PyTorch events without an address (PyTorch 1.8) form no
-- blocks; their rows are the running sum of their Bytes. A memory snapshot's trace
-- records only what happened after recording began: its live_bytes counts the traced
-- blocks, and its allocator_live_bytes what the allocator held, blocks allocated before
-- recording included (the segments' held blocks at snapshot time replayed backwards
-- through the trace; see memory_blocks for those blocks).
-- The running sum is computed once at ingest (private table internal.memory_timeline_rows, from
-- ingest/derived/memory.sql); this view adds each Ascend block's name and call stack.
-- depends: internal.stack_frames
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
  -- 'ascend', 'torch' or 'snapshot'.
  source,
  -- Time of the event: ns since the epoch, or the trace position where clock is 'sequence'.
  ts_ns,
  -- 'alloc' or 'release'.
  event,
  -- +size at alloc, -size at release, in bytes.
  delta_bytes,
  -- Bytes of blocks live right after this event (running sum of delta_bytes); for a memory snapshot, of the blocks its trace allocated.
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
  -- Innermost Python frame of that call stack (native frames never stand for it).
  call_stack_top,
  -- Provenance of the block (memory_blocks.origin_row).
  origin_row,
  -- The allocator that made the block: 'PTA', 'GE' (Ascend cann::* rows), 'torch' or 'snapshot'.
  allocator,
  -- Bytes live right after this event in blocks of this row's allocator alone; for a memory snapshot, all the allocator held, blocks allocated before recording included.
  allocator_live_bytes,
  -- Which rule gave the stack: 'op', 'forward_op', 'enclosing_op' (see memory_alloc_stack), 'allocation' (snapshots) or NULL.
  stack_source,
  -- Innermost Python frame of the stack outside library code ([stacks] in warehouse.toml).
  user_frame,
  -- True on a release that was inferred: another allocation reused the block's address.
  release_inferred,
  -- Clock of ts_ns: 'epoch', or 'sequence' (a memory snapshot's trace positions, no time).
  clock
) as
with timeline as (
  select * from internal.memory_timeline_rows
),

ascend_matches as (
  select source_id, source_row, name, attributed_stack_id as stack_id, stack_source from internal.memory_record_ops
),

final as (
  select
    t.run, t.role, t.rank_id, t.capture, t.device, t.source, t.ts_ns, t.event, t.delta_bytes,
    t.live_bytes, t.allocator_allocated_bytes, t.allocator_reserved_bytes,
    coalesce(t.name, m.name) as name,
    t.size_bytes,
    coalesce(t.stack_id, m.stack_id) as stack_id,
    s.top_frame as call_stack_top,
    t.origin_row,
    t.allocator,
    t.allocator_live_bytes,
    coalesce(t.stack_source, m.stack_source) as stack_source,
    s.user_frame,
    coalesce(t.release_inferred, false) as release_inferred,
    coalesce(t.clock, 'epoch') as clock,
  from timeline as t
  left join ascend_matches as m  -- PyTorch rows carry their own name and stack_id, no source_id
    on t.source_id = m.source_id and t.origin_row = m.source_row
  left join internal.stack_frames as s on coalesce(t.stack_id, m.stack_id) = s.stack_id
)

select * from final
