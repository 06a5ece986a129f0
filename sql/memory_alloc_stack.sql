-- One row per allocation row of memory_records (size_bytes > 0), with the cpu_op of the
-- same (run, role, rank_id, capture, name) that started last at or before the allocation
-- (ts_ns <= alloc_ns), found by ASOF JOIN whether or not that op carries a stack. An
-- allocation with no such op (its name is absent from the trace, or it comes before the
-- first op) stays, with NULL op columns. When several same-name ops start in the same ns,
-- the one with a stack wins, then the longest, then the lowest tid.
-- The stack (stack_id, call_stack, call_stack_top, user_frame) is the best one the trace
-- justifies, and stack_source says which rule gave it:
--   'forward_op'   the matched op runs inside an autograd node (a backward op: seq_no >= 0,
--                  fwd_tid > 0, enclosing it on its thread): the stack of the node's forward
--                  op, the op with the same seq_no and fwd_tid 0 that started last at or
--                  before the node (Kineto's fwdbwd flow links the same pairs);
--   'op'           else the matched op's own stack;
--   'enclosing_op' else the innermost op with such a stack whose [ts, ts + dur) holds the
--                  allocation, on any thread of the rank (of the threads' innermost ops the
--                  one that started last, then the lowest tid): cann::* rows, whose names
--                  are GE's and never cpu_ops, get their stack this way;
--   NULL           none of these.
-- op_stack_id is the matched op's own stack. RL-Insight's rule (only ops with a stack) is
-- memory_event_rows. The match is computed once at ingest (ingest/derived/memory.sql,
-- private table internal.memory_record_ops); this view joins it back.
-- depends: internal.memory_records_matched, internal.stack_frames
create or replace view memory_alloc_stack (
  -- Run name.
  run,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Rank dir the allocation came from.
  capture,
  -- 1-based data row of operator_memory.csv.
  source_row,
  -- Operator that allocated (Name).
  name,
  -- Device, e.g. NPU:0.
  device,
  -- Bytes allocated.
  size_bytes,
  -- Allocation time, ns since the epoch.
  alloc_ns,
  -- Release time, ns since the epoch; NULL when never released within the capture.
  release_ns,
  -- Start of the matched cpu_op, ns since the epoch; NULL when none matched.
  op_ts_ns,
  -- Duration of the matched cpu_op in ns.
  op_dur_ns,
  -- Thread of the matched cpu_op.
  op_tid,
  -- alloc_ns - op_ts_ns: how long after the op started the allocation happened.
  gap_ns,
  -- True when the allocation falls inside the op: alloc_ns <= op_ts_ns + op_dur_ns.
  in_op,
  -- The attributed call stack (call_stacks.stack_id); NULL when no rule gives one.
  stack_id,
  -- The attributed call stack, frames separated by newlines, innermost first.
  call_stack,
  -- Innermost Python frame of the attributed call stack (native frames never stand for it).
  call_stack_top,
  -- Innermost Python frame of the attributed stack outside library code ([stacks] in warehouse.toml).
  user_frame,
  -- Which rule gave the stack: 'op', 'forward_op', 'enclosing_op', or NULL (see the view's comment).
  stack_source,
  -- The matched op's own call stack (call_stacks.stack_id); NULL when it carries none.
  op_stack_id,
  -- Allocator's total allocated bytes right after the allocation (memory_records).
  alloc_total_allocated_bytes,
  -- Allocator's total reserved bytes right after the allocation.
  alloc_total_reserved_bytes,
  -- Allocator's total allocated bytes right after the release.
  release_total_allocated_bytes,
  -- Allocator's total reserved bytes right after the release.
  release_total_reserved_bytes
) as
with matched as (
  select * from internal.memory_records_matched
  where size_bytes > 0
),

final as (
  select
    m.run, m.role, m.rank_id, m.capture, m.source_row, m.name, m.device, m.size_bytes,
    m.alloc_ns, m.release_ns, m.op_ts_ns, m.op_dur_ns, m.op_tid,
    m.alloc_ns - m.op_ts_ns as gap_ns,
    m.alloc_ns <= m.op_ts_ns + coalesce(m.op_dur_ns, 0) as in_op,
    m.attributed_stack_id as stack_id,
    s.stack as call_stack,
    s.top_frame as call_stack_top,
    f.user_frame,
    m.stack_source,
    m.stack_id as op_stack_id,
    m.alloc_total_allocated_bytes, m.alloc_total_reserved_bytes,
    m.release_total_allocated_bytes, m.release_total_reserved_bytes,
  from matched as m
  left join call_stacks as s on m.attributed_stack_id = s.stack_id
  left join internal.stack_frames as f on m.attributed_stack_id = f.stack_id
)

select * from final
