-- Derived memory tables, refreshed by rlwh ingest for one (run, role, rank_id, capture)
-- at a time: $run, $role, $rank_id and $capture are bound to that key, and each statement
-- filters its inputs on the key itself, so a refresh reads only that rank's rows.
-- Statements are separated by a line holding only ';'. They run once every file of an
-- ingest is loaded and the parse workers have exited (the window sorts take ~500 MB).

delete from _memory_timeline
where source = 'ascend' and run = $run and role = $role and rank_id = $rank_id and capture = $capture
;

-- The Ascend live-memory timeline: +size at each allocation row's alloc, -size at its
-- release, summed in time order per device. At equal times releases come first, then the
-- CSV row. Only numbers ride through the window (a name column makes its sort ~50%
-- slower) and the keys are added after it; the memory_timeline view joins each block's
-- name and call stack back.
insert into _memory_timeline by name
with blocks as (
  select
    source_id, device, alloc_ns, release_ns, size_bytes, source_row,
    alloc_total_allocated_bytes, alloc_total_reserved_bytes,
    release_total_allocated_bytes, release_total_reserved_bytes,
  from memory_records
  where size_bytes > 0
    and run = $run and role = $role and rank_id = $rank_id and capture = $capture
),

events as (
  -- One scan of the blocks, two rows per released block: its alloc and its release.
  select
    b.source_id, b.device,
    if(e.event = 'alloc', b.alloc_ns, b.release_ns) as ts_ns,
    e.event,
    if(e.event = 'alloc', b.size_bytes, -b.size_bytes) as delta_bytes,
    if(e.event = 'alloc', b.alloc_total_allocated_bytes, b.release_total_allocated_bytes)
      as allocator_allocated_bytes,
    if(e.event = 'alloc', b.alloc_total_reserved_bytes, b.release_total_reserved_bytes)
      as allocator_reserved_bytes,
    b.size_bytes, b.source_row as origin_row,
  from blocks as b
  cross join (values ('alloc'), ('release')) as e (event)
  where if(e.event = 'alloc', b.alloc_ns, b.release_ns) is not null
)

select
  $run as run, $role as role, $rank_id as rank_id, $capture as capture, 'ascend' as source,
  source_id, device, ts_ns, event, delta_bytes,
  (sum(delta_bytes) over (
    partition by device
    -- ts_ns, then releases first, then the row, as one key: DuckDB's window sorts one
    -- HUGEINT several times faster than three columns (source_row < 2^40).
    order by ts_ns::hugeint * 2199023255552 + (event = 'alloc')::hugeint * 1099511627776 + origin_row
    rows between unbounded preceding and current row
  ))::bigint as live_bytes,
  allocator_allocated_bytes, allocator_reserved_bytes, size_bytes, origin_row,
from events
;

delete from _memory_record_ops
where run = $run and role = $role and rank_id = $rank_id and capture = $capture
;

-- Each memory_records row and the cpu_op of the same name that started last at or before
-- it (one ASOF JOIN for both rules): stack_id is that op's stack, stacked_stack_id the
-- stack of the last op up to it that had one (RL-Insight's rule). When several same-name
-- ops start in the same ns exactly one may match, or the answer would be arbitrary: the
-- one with a stack, then the longest, then the lowest tid, then the lowest stack_id.
-- One window does it all: ops in (ts_ns, preference) order, the last of each ts_ns kept,
-- the last stack so far carried along. Its sort spills to disk, so a rank of any size
-- fits the memory limit (a max_by hash aggregate did not: 4.7 M ops needed > 512 MB).
insert into _memory_record_ops
with records as (
  select source_id, source_row, name, alloc_ns
  from memory_records
  where run = $run and role = $role and rank_id = $rank_id and capture = $capture
),

ordered_ops as (
  select
    name, ts_ns, dur_ns, tid, stack_id,
    lead(ts_ns) over same_name as next_ts_ns,
    last_value(stack_id ignore nulls) over (same_name rows between unbounded preceding and current row)
      as stacked_stack_id,
  from cpu_ops
  where ts_ns is not null
    and run = $run and role = $role and rank_id = $rank_id and capture = $capture
  window same_name as (
    partition by name
    -- ts_ns, then has a stack, then the duration, as one HUGEINT (a fast sort key)
    order by ts_ns::hugeint * 18446744073709551616 + (stack_id is not null)::hugeint * 9223372036854775808
        + greatest(coalesce(dur_ns, -1), -1) + 1,
      coalesce(tid, 9223372036854775807) desc, coalesce(stack_id, 0) desc
  )
),

ops as (
  select * from ordered_ops where next_ts_ns is distinct from ts_ns
)

select
  $run, $role, $rank_id, $capture, r.source_id, r.source_row, r.name,
  o.ts_ns as op_ts_ns, o.dur_ns as op_dur_ns, o.tid as op_tid, o.stack_id, o.stacked_stack_id,
from records as r
asof left join ops as o
  on r.name = o.name
  and r.alloc_ns >= o.ts_ns
;

delete from _memory_timeline
where source = 'torch' and run = $run and role = $role and rank_id = $rank_id and capture = $capture
;

-- The PyTorch blocks of memory_blocks, then the same running sum as for Ascend rows. At
-- equal times releases come first, then the event's position in its file. A statement of
-- its own so the Ascend window stays narrow: one statement for both sources, carrying
-- names and stacks, took 7.7 s instead of 5.8 s on 1.5 M Ascend blocks.
insert into _memory_timeline by name
with blocks as (
  select * from memory_blocks
  where source = 'torch' and run = $run and role = $role and rank_id = $rank_id and capture = $capture
),

events as (
  select
    b.run, b.role, b.rank_id, b.capture, b.device, b.source,
    if(e.event = 'alloc', b.alloc_ns, b.release_ns) as ts_ns,
    e.event,
    if(e.event = 'alloc', b.size_bytes, -b.size_bytes) as delta_bytes,
    if(e.event = 'alloc', b.allocated_after_alloc_bytes, b.allocated_after_release_bytes)
      as allocator_allocated_bytes,
    if(e.event = 'alloc', b.reserved_after_alloc_bytes, b.reserved_after_release_bytes)
      as allocator_reserved_bytes,
    b.name, b.size_bytes, b.stack_id, b.origin_row,
  from blocks as b
  cross join (values ('alloc'), ('release')) as e (event)
  where if(e.event = 'alloc', b.alloc_ns, b.release_ns) is not null
)

select
  run, role, rank_id, capture, device, source, ts_ns, event, delta_bytes,
  (sum(delta_bytes) over (
    partition by device
    order by ts_ns::hugeint * 2199023255552 + (event = 'alloc')::hugeint * 1099511627776 + origin_row
    rows between unbounded preceding and current row
  ))::bigint as live_bytes,
  allocator_allocated_bytes, allocator_reserved_bytes, name, size_bytes, stack_id, origin_row,
from events
;
