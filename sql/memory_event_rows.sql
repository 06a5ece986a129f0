-- One row per operator_memory.csv row (allocations and release rows alike) in RL-Insight's
-- MemoryEventRow shape and units, so notebooks written against RL-Insight keep working.
-- Its rule: the call stack of the nearest same-name cpu_op AT OR BEFORE the allocation
-- that carries a stack (ops without a stack are passed over); empty strings when none.
-- Times in ms and sizes in KB/MB are DOUBLEs, as RL-Insight has them. The match is
-- computed once at ingest (ingest/derived/memory.sql, private table internal.memory_record_ops).
-- depends: internal.memory_records_matched
create or replace view memory_event_rows (
  -- Operator name (Name).
  name,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Call stack with frames joined by ";\r\n" as in trace_view.json; '' when no match.
  call_stack,
  -- Innermost Python frame of the call stack (native frames never stand for it); '' when no match or none.
  call_stack_top,
  -- Size in KB; negative for a release row.
  size_kb,
  -- Allocation time in ms since the epoch.
  start_time_ms,
  -- How long the block stayed allocated, in ms; 0.0 when never released.
  duration_ms,
  -- Allocator's total allocated MB right after the allocation.
  total_allocated_mb,
  -- Allocator's total reserved MB right after the allocation.
  total_reserved_mb,
  -- Allocator's total active MB right after the allocation.
  total_active_mb,
  -- Device, e.g. NPU:0.
  device_type,
  -- Run name (not in RL-Insight; added so runs can be told apart).
  run,
  -- Rank dir the row came from (not in RL-Insight).
  capture,
  -- 1-based data row of operator_memory.csv (not in RL-Insight).
  source_row
) as
with matched as (
  -- RL-Insight's rule: the stack of the last op up to the allocation that had one.
  select * exclude (stack_id), stacked_stack_id as stack_id
  from internal.memory_records_matched
),

stacks as (
  -- Each distinct stack in RL-Insight's spelling once, not once per row.
  select stack_id, replace(stack, chr(10), ';' || chr(13) || chr(10)) as stack, top_frame
  from call_stacks
),

final as (
  select
    m.name,
    m.role,
    m.rank_id,
    coalesce(s.stack, '') as call_stack,
    coalesce(s.top_frame, '') as call_stack_top,
    m.size_bytes / 1024.0 as size_kb,
    m.alloc_ns / 1e6 as start_time_ms,
    coalesce(m.duration_ns / 1e6, 0.0) as duration_ms,
    m.alloc_total_allocated_bytes / 1048576.0 as total_allocated_mb,
    m.alloc_total_reserved_bytes / 1048576.0 as total_reserved_mb,
    m.alloc_total_active_bytes / 1048576.0 as total_active_mb,
    m.device as device_type,
    m.run,
    m.capture,
    m.source_row,
  from matched as m
  left join stacks as s on m.stack_id = s.stack_id
)

select * from final
