-- One row per (run, role, rank_id, capture, device, source, call_stack_top, user_frame, name): blocks
-- never released within the capture, grouped by where they were allocated. Leak suspects,
-- or memory that simply outlived the profiling window (a memory snapshot's blocks allocated
-- before recording and still held, such as the weights, count here too).
-- depends: memory_blocks
create or replace view memory_unreleased (
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
  -- Innermost Python frame of the allocating call stack (native frames never stand for it); NULL when unknown.
  call_stack_top,
  -- Operator that allocated the blocks.
  name,
  -- A representative full stack id for the group (call_stacks.stack_id).
  stack_id,
  -- Blocks never released.
  blocks,
  -- Their bytes.
  unreleased_bytes,
  -- unreleased_bytes in MiB.
  unreleased_mb,
  -- First such allocation, ns since the epoch.
  first_alloc_ns,
  -- Last such allocation, ns since the epoch.
  last_alloc_ns,
  -- Innermost Python frame of the stack outside library code: the line of the user's code.
  user_frame
) as
with blocks as (
  select * from memory_blocks where release_ns is null
),

final as (
  select
    run, role, rank_id, capture, device, source, call_stack_top, name,
    min(stack_id) as stack_id,
    count(*) as blocks,
    sum(size_bytes)::bigint as unreleased_bytes,
    round(sum(size_bytes) / 1048576.0, 3) as unreleased_mb,
    min(alloc_ns) as first_alloc_ns,
    max(alloc_ns) as last_alloc_ns,
    user_frame,
  from blocks
  group by run, role, rank_id, capture, device, source, call_stack_top, user_frame, name
)

select * from final
