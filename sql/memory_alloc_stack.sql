-- One row per allocation row of memory_records (size_bytes > 0), with the cpu_op of the
-- same (run, role, rank_id, capture, name) that started last at or before the allocation
-- (ts_ns <= alloc_ns), found by ASOF JOIN whether or not that op carries a stack. An
-- allocation with no such op (its name is absent from the trace, or it comes before the
-- first op) stays, with NULL op columns and NULL stack. When several same-name ops start
-- in the same ns, the one with a stack wins, then the longest. RL-Insight's rule (only ops
-- with a stack) is memory_event_rows. The match is computed once at ingest
-- (ingest/derived/memory.sql, private table _memory_record_ops); this view joins it back.
-- depends: _memory_records_matched
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
  -- Stack of the matched op (call_stacks.stack_id); NULL when the op has none.
  stack_id,
  -- The full call stack, frames separated by newlines; NULL when the op has none.
  call_stack,
  -- First frame of the call stack.
  call_stack_top,
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
  select * from _memory_records_matched
  where size_bytes > 0
),

final as (
  select
    m.run, m.role, m.rank_id, m.capture, m.source_row, m.name, m.device, m.size_bytes,
    m.alloc_ns, m.release_ns, m.op_ts_ns, m.op_dur_ns, m.op_tid,
    m.alloc_ns - m.op_ts_ns as gap_ns,
    m.alloc_ns <= m.op_ts_ns + coalesce(m.op_dur_ns, 0) as in_op,
    m.stack_id,
    s.stack as call_stack,
    s.top_frame as call_stack_top,
    m.alloc_total_allocated_bytes, m.alloc_total_reserved_bytes,
    m.release_total_allocated_bytes, m.release_total_reserved_bytes,
  from matched as m
  left join call_stacks as s on m.stack_id = s.stack_id
)

select * from final
