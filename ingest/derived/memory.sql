-- Derived memory tables, refreshed by rlwh ingest for a group of (run, role, rank_id,
-- capture) keys at once (rlwh.warehouse.derive): the temp table _derive_keys holds the
-- group, one key_id per key, and each statement reads only the rows of those keys, joined
-- to their key_id (an INTEGER: sorts and joins carry it instead of four key columns, which
-- come back from _derive_keys for the rows written). $runs and $captures list the group's
-- runs and captures: a filter on them reaches into a view's window (which a join does not),
-- so a view reads only those ranks. Every window, ASOF join and group is per key_id.
-- Statements are separated by a line holding only ';'. A statement's `-- needs:` line names
-- the tables whose rows it derives from: it runs only for a group that holds rows of one
-- of them (rlwh.warehouse.derive); one without (a delete of the group's old rows, a drop)
-- always runs. They run once every file of an ingest is loaded and the parse workers have
-- exited (the window sorts take ~500 MB a large rank; they spill to disk beyond the memory
-- limit).
--
-- Order: the keys' ops and the stack each one justifies (_key_op_stacks), their nesting
-- (_key_stack_levels, _key_depths) and their starts (_key_op_starts), temp tables dropped
-- at the end; the ranks' devices; the Ascend match and timeline; then the PyTorch blocks
-- and the PyTorch and snapshot timelines.

-- Every cpu_op of the key with the stack its allocations get. An autograd node is a
-- backward op with seq_no >= 0 and fwd_tid > 0; its forward op is the op with the same
-- seq_no and fwd_tid 0 that started last at or before the node (the pairs of Kineto's
-- fwdbwd flow events; of forward ops starting in the same ns, one with a stack, then the
-- lowest stack_id; of nodes starting together on a thread, the longest). An op inside a
-- node on its thread (the node included) gets the forward op's stack: 'forward_op' (the
-- code that made the tensor the backward pass works on; Ascend writes no stack on
-- backward threads). Otherwise its own stack: 'op'.
-- needs: memory_records, torch_memory_events
create or replace temp table _key_op_stacks as
with ops as (
  select k.key_id, o.pid, o.tid, o.name, o.ts_ns, o.dur_ns, o.stack_id, o.seq_no, o.fwd_tid
  from cpu_ops as o
  join _derive_keys as k using (run, role, rank_id, capture)
  where o.ts_ns is not null
),

nodes as (
  -- One node per (thread, start): the longest, then the lowest seq_no.
  select key_id, tid, ts_ns, arg_max(seq_no, [coalesce(dur_ns, 0), -seq_no]) as seq_no,
    max(coalesce(dur_ns, 0)) as dur_ns
  from ops where seq_no >= 0 and fwd_tid > 0
  group by key_id, tid, ts_ns
),

forward_ops as (
  -- One forward op per (seq_no, start): one with a stack, then the lowest stack_id.
  select key_id, seq_no, ts_ns, min(stack_id) as stack_id
  from ops where seq_no >= 0 and coalesce(fwd_tid, 0) = 0
  group by key_id, seq_no, ts_ns
),

node_stacks as (
  select n.key_id, n.tid, n.ts_ns, n.dur_ns, f.stack_id as forward_stack_id
  from nodes as n
  asof join forward_ops as f
    on n.key_id = f.key_id
    and n.seq_no = f.seq_no
    and n.ts_ns >= f.ts_ns
),

ops_in_nodes as (
  -- The node that started last at or before the op on its thread, if it encloses the op.
  select
    o.*,
    if(o.ts_ns + coalesce(o.dur_ns, 0) <= n.ts_ns + n.dur_ns, n.forward_stack_id, null) as forward_stack_id,
  from ops as o
  asof left join node_stacks as n
    on o.key_id = n.key_id
    and o.tid = n.tid
    and o.ts_ns >= n.ts_ns
)

select
  key_id, pid, tid, name, ts_ns, dur_ns, stack_id, seq_no, fwd_tid,
  coalesce(forward_stack_id, stack_id) as attributed_stack_id,
  case when forward_stack_id is not null then 'forward_op' when stack_id is not null then 'op' end
    as stack_source,
from ops_in_nodes
;

-- Ops with an attributed stack, each with its nesting level on its thread, for the
-- 'enclosing_op' rule: the innermost such op whose [ts, ts + dur) holds a time. Within one
-- thread ops nest, so at time t the innermost open op is the one at level depth(t) that
-- started last; depth(t) is a running count of starts minus ends (at equal times ends
-- apply first, so an op that starts as another ends is not inside it; of ops starting
-- together the longer is outer). Ops of no duration enclose nothing.
-- _key_depths: depth(t) after every edge at or before t, one row per (thread, time);
-- _key_stack_levels: each such op's level, the count right after its own start.
-- needs: memory_records, torch_memory_events
create or replace temp table _key_edges as
with stacked as (
  select key_id, tid, ts_ns, ts_ns + dur_ns as end_ns, attributed_stack_id
  from _key_op_stacks
  where attributed_stack_id is not null and tid is not null and dur_ns > 0
),

edges as (
  select key_id, tid, ts_ns as t, 1 as delta, end_ns, attributed_stack_id from stacked
  union all
  select key_id, tid, end_ns, -1, end_ns, null from stacked
)

-- The counts run over every thread of the group in one order (key_id, tid, then time), with
-- no PARTITION BY, which DuckDB streams (0.16 s against 0.37 s partitioned, 64 ranks): each
-- thread's starts and ends cancel out, so its count starts at 0 however many threads
-- came before it.
select
  key_id, tid, t, delta, attributed_stack_id,
  sum(delta) over (order by key_id, tid, t, delta, end_ns desc rows unbounded preceding) as depth,
  sum(delta) over (order by key_id, tid, t range unbounded preceding) as depth_at_t,
from edges
;

-- needs: memory_records, torch_memory_events
create or replace temp table _key_stack_levels as
select key_id, tid, t as ts_ns, depth, attributed_stack_id from _key_edges where delta = 1
;

-- needs: memory_records, torch_memory_events
create or replace temp table _key_depths as
select distinct key_id, tid, t, depth_at_t as depth from _key_edges
;

drop table if exists _key_edges
;

-- Each op start's attributed stack, one per (thread, start, name): how a PyTorch memory
-- event (which names its enclosing op by thread, start and name) finds it.
-- needs: torch_memory_events
create or replace temp table _key_op_starts as
select
  key_id, tid, ts_ns, name,
  any_value(attributed_stack_id) as attributed_stack_id, any_value(stack_source) as stack_source,
from _key_op_stacks
group by key_id, tid, ts_ns, name
;

-- A rank's device as its data names it (operator_memory.csv's Device Type, e.g. NPU:3)
-- where profiler_info did not say: the device most of its memory rows name.
-- needs: memory_records
update ranks set device = named.device
from (
  select run, role, rank_id, capture, mode(device) as device
  from memory_records
  semi join _derive_keys using (run, role, rank_id, capture)
  where device is not null
  group by run, role, rank_id, capture
) as named
where ranks.device is null
  and ranks.run = named.run and ranks.role = named.role and ranks.rank_id = named.rank_id
  and ranks.capture = named.capture
;

delete from internal.memory_record_ops as d
using _derive_keys as k
where d.run = k.run and d.role = k.role and d.rank_id = k.rank_id and d.capture = k.capture
;

-- Each memory_records row and the cpu_op of the same name that started last at or before
-- it (one ASOF JOIN for both rules): stack_id is that op's own stack, stacked_stack_id the
-- stack of the last op up to it that had one (RL-Insight's rule), attributed_stack_id the
-- stack the op justifies (_key_op_stacks). When several same-name ops start in the same
-- ns exactly one may match, or the answer would be arbitrary: the one with a stack, then
-- the longest, then the lowest tid, then the lowest stack_id. One window does it all: ops
-- in (ts_ns, preference) order, the last of each ts_ns kept, the last stack so far carried
-- along. Its sort spills to disk, so a rank of any size fits the memory limit.
-- An allocation whose op justifies no stack (cann::* rows have no same-name op) takes the
-- innermost op with a stack whose [ts, ts + dur) holds it, on any thread of the rank
-- ('enclosing_op': of the threads' innermost ops, the one that started last, then the
-- lowest tid).
-- needs: memory_records
insert into internal.memory_record_ops by name
with records as (
  select k.key_id, r.source_id, r.source_row, r.name, r.alloc_ns
  from memory_records as r
  join _derive_keys as k using (run, role, rank_id, capture)
),

ordered_ops as (
  select
    key_id, name, ts_ns, dur_ns, tid, stack_id, attributed_stack_id, stack_source,
    lead(ts_ns) over same_name as next_ts_ns,
    last_value(stack_id ignore nulls) over (same_name rows between unbounded preceding and current row)
      as stacked_stack_id,
  from _key_op_stacks
  window same_name as (
    partition by key_id, name
    -- ts_ns, then has a stack, then the duration, as one HUGEINT (a fast sort key)
    order by ts_ns::hugeint * 18446744073709551616 + (stack_id is not null)::hugeint * 9223372036854775808
        + greatest(coalesce(dur_ns, -1), -1) + 1,
      coalesce(tid, 9223372036854775807) desc, coalesce(stack_id, 0) desc
  )
),

ops as (
  select * from ordered_ops where next_ts_ns is distinct from ts_ns
),

matched as (
  select
    r.key_id, r.source_id, r.source_row, r.name, r.alloc_ns,
    o.ts_ns as op_ts_ns, o.dur_ns as op_dur_ns, o.tid as op_tid, o.stack_id, o.stacked_stack_id,
    o.attributed_stack_id, o.stack_source,
  from records as r
  asof left join ops as o
    on r.key_id = o.key_id
    and r.name = o.name
    and r.alloc_ns >= o.ts_ns
),

unattributed as (
  select key_id, source_id, source_row, alloc_ns
  from matched
  where attributed_stack_id is null and alloc_ns is not null
),

threads as (
  select distinct key_id, tid from _key_depths
),

depth_at as (
  select u.source_id, u.source_row, u.alloc_ns, l.key_id, l.tid, l.depth
  from unattributed as u
  join threads as th on u.key_id = th.key_id
  asof join _key_depths as l
    on l.key_id = th.key_id
    and l.tid = th.tid
    and u.alloc_ns >= l.t
  where l.depth > 0
),

innermost as (
  select d.source_id, d.source_row, l.ts_ns, l.tid, l.attributed_stack_id
  from depth_at as d
  asof join _key_stack_levels as l
    on l.key_id = d.key_id
    and l.tid = d.tid
    and l.depth = d.depth
    and d.alloc_ns >= l.ts_ns
),

enclosing as (
  select source_id, source_row, arg_max(attributed_stack_id, [ts_ns, -tid]) as stack_id
  from innermost
  group by source_id, source_row
)

select
  k.run, k.role, k.rank_id, k.capture,
  m.source_id, m.source_row, m.name, m.op_ts_ns, m.op_dur_ns, m.op_tid, m.stack_id, m.stacked_stack_id,
  coalesce(m.attributed_stack_id, e.stack_id) as attributed_stack_id,
  coalesce(m.stack_source, if(e.stack_id is not null, 'enclosing_op', null)) as stack_source,
from matched as m
join _derive_keys as k using (key_id)
left join enclosing as e using (source_id, source_row)
;

delete from internal.memory_timeline_rows as d
using _derive_keys as k
where d.source = 'ascend'
  and d.run = k.run and d.role = k.role and d.rank_id = k.rank_id and d.capture = k.capture
;

-- The Ascend live-memory timeline: +size at each allocation row's alloc, -size at its
-- release, summed in time order per device (live_bytes) and per device and allocator
-- (allocator_live_bytes: internal.ascend_allocator, 'GE' or 'PTA'), in internal.memory_event_order (time,
-- releases first, then the CSV row). One window sorts once and sums twice: all blocks, and GE's alone (a
-- PTA row's own sum is the difference; a second window per allocator doubled the sort,
-- 4 s on 3 M events). Only numbers ride through it (a name column makes the sort ~50%
-- slower) and the keys are added after it; the memory_timeline view joins each block's
-- name and call stack back, and reads a NULL clock as 'epoch'.
-- A device's running sum is the running sum over every device of the group, in one order
-- (key_id, device, then event order), less what the devices before it in that order sum
-- to (_device_starts). DuckDB streams a running sum that has no PARTITION BY; partitioned
-- by device it cost 2.8x (0.91 s against 0.33 s for 1.5 M events, 64 ranks).
-- needs: memory_records
insert into internal.memory_timeline_rows by name
with blocks as (
  select
    k.key_id, r.source_id, r.device, r.alloc_ns, r.release_ns, r.size_bytes, r.source_row,
    internal.ascend_allocator(r.name) as allocator,
    r.alloc_total_allocated_bytes, r.alloc_total_reserved_bytes,
    r.release_total_allocated_bytes, r.release_total_reserved_bytes,
  from memory_records as r
  join _derive_keys as k using (run, role, rank_id, capture)
  where r.size_bytes > 0
),

events as (
  -- One scan of the blocks, two rows per released block: its alloc and its release.
  select
    b.key_id, b.source_id, b.device, b.allocator,
    if(e.event = 'alloc', b.alloc_ns, b.release_ns) as ts_ns,
    e.event,
    if(e.event = 'alloc', b.size_bytes, -b.size_bytes) as delta_bytes,
    if(e.event = 'alloc', b.alloc_total_allocated_bytes, b.release_total_allocated_bytes)
      as allocator_allocated_bytes,
    if(e.event = 'alloc', b.alloc_total_reserved_bytes, b.release_total_reserved_bytes)
      as allocator_reserved_bytes,
    b.size_bytes, b.source_row as origin_row,
    internal.memory_event_order(ts_ns, e.event, b.source_row) as sort_key,
  from blocks as b
  cross join (values ('alloc'), ('release')) as e (event)
  where if(e.event = 'alloc', b.alloc_ns, b.release_ns) is not null
),

running as (
  select
    *,
    sum(delta_bytes) over in_order as running_bytes,
    sum(if(allocator = 'GE', delta_bytes, 0)) over in_order as running_ge_bytes,
  from events
  window in_order as (order by key_id, device, sort_key rows unbounded preceding)
),

device_totals as (
  select key_id, device, sum(delta_bytes) as bytes, sum(if(allocator = 'GE', delta_bytes, 0)) as ge_bytes,
  from events
  group by key_id, device
),

device_starts as (
  -- What the devices before each one (in the order of `running`) sum to.
  select
    key_id, device,
    coalesce(sum(bytes) over before, 0) as bytes_before,
    coalesce(sum(ge_bytes) over before, 0) as ge_bytes_before,
  from device_totals
  window before as (order by key_id, device rows between unbounded preceding and 1 preceding)
),

timeline as (
  select
    r.*,
    (r.running_bytes - d.bytes_before)::bigint as live_bytes,
    (r.running_ge_bytes - d.ge_bytes_before)::bigint as ge_live_bytes,
  from running as r
  join device_starts as d on r.key_id = d.key_id and r.device is not distinct from d.device
)

select
  k.run, k.role, k.rank_id, k.capture, 'ascend' as source,
  t.source_id, t.device, t.allocator, t.ts_ns, t.event, t.delta_bytes, t.live_bytes,
  if(t.allocator = 'GE', t.ge_live_bytes, t.live_bytes - t.ge_live_bytes) as allocator_live_bytes,
  t.allocator_allocated_bytes, t.allocator_reserved_bytes, t.size_bytes, t.origin_row,
from timeline as t
join _derive_keys as k using (key_id)
;

delete from internal.torch_memory_blocks as d
using _derive_keys as k
where d.run = k.run and d.role = k.role and d.rank_id = k.rank_id and d.capture = k.capture
;

-- The PyTorch blocks: each allocation event with an address, paired with the next event
-- at its (device, addr) in time order across threads (internal.torch_memory_pairs). Its stack is
-- the one its enclosing op justifies (_key_op_stacks: 'forward_op' or 'op'), else the
-- innermost op with a stack whose [ts, ts + dur) holds it on its own thread ('enclosing_op').
-- needs: torch_memory_events
insert into internal.torch_memory_blocks by name
with allocations as (
  select k.key_id, p.*
  from internal.torch_memory_pairs as p
  join _derive_keys as k using (run, role, rank_id, capture)
  where p.bytes > 0 and p.addr is not null
    and list_contains($runs, p.run) and list_contains($captures, p.capture)
),

matched as (
  select a.*, o.attributed_stack_id, o.stack_source
  from allocations as a
  left join _key_op_starts as o
    on a.key_id = o.key_id and a.tid = o.tid and a.op_ts_ns = o.ts_ns and a.op_name = o.name
),

depth_at as (
  select m.source_id, m.event_index, m.ts_ns, l.key_id, l.tid, l.depth
  from matched as m
  asof join _key_depths as l
    on l.key_id = m.key_id
    and l.tid = m.tid
    and m.ts_ns >= l.t
  where m.attributed_stack_id is null and l.depth > 0
),

enclosing as (
  select d.source_id, d.event_index, l.attributed_stack_id
  from depth_at as d
  asof join _key_stack_levels as l
    on l.key_id = d.key_id
    and l.tid = d.tid
    and l.depth = d.depth
    and d.ts_ns >= l.ts_ns
)

select
  m.run, m.role, m.rank_id, m.capture, m.source_id, m.device, m.event_index as origin_row,
  m.op_name as name, m.ts_ns as alloc_ns,
  case when m.next_bytes is not null then m.next_ts_ns end as release_ns,
  coalesce(m.next_bytes > 0, false) as release_inferred,  -- false, not NULL, for a block never released
  m.bytes as size_bytes, m.stack_id as op_stack_id,
  coalesce(m.attributed_stack_id, e.attributed_stack_id) as stack_id,
  coalesce(m.stack_source, if(e.attributed_stack_id is not null, 'enclosing_op', null)) as stack_source,
  m.total_allocated_bytes as alloc_total_allocated_bytes,
  m.total_reserved_bytes as alloc_total_reserved_bytes,
  case when m.next_bytes < 0 then m.next_total_allocated_bytes end as release_total_allocated_bytes,
  case when m.next_bytes < 0 then m.next_total_reserved_bytes end as release_total_reserved_bytes,
from matched as m
left join enclosing as e using (source_id, event_index)
;

delete from internal.memory_timeline_rows as d
using _derive_keys as k
where d.source in ('torch', 'snapshot')
  and d.run = k.run and d.role = k.role and d.rank_id = k.rank_id and d.capture = k.capture
;

-- The PyTorch timeline, one allocator per device (so allocator_live_bytes = live_bytes),
-- the same running sum as for Ascend rows, in internal.memory_event_order (time, releases first,
-- then the event's position in its file). A statement of its own so the Ascend window
-- stays narrow. Its events:
-- - the PyTorch blocks' allocs and releases;
-- - PyTorch events without an address (PyTorch 1.8 wrote none): no block, and live bytes
--   are their running sum.
-- needs: torch_memory_events
insert into internal.memory_timeline_rows by name
with blocks as (
  select
    k.key_id, b.source_id, b.device, b.alloc_ns, b.release_ns, b.release_inferred, b.size_bytes,
    b.alloc_total_allocated_bytes, b.alloc_total_reserved_bytes,
    b.release_total_allocated_bytes, b.release_total_reserved_bytes,
    b.name, b.stack_id, b.stack_source, b.origin_row,
  from internal.torch_memory_blocks as b
  join _derive_keys as k using (run, role, rank_id, capture)
),

block_events as (
  select
    b.key_id, b.source_id, b.device,
    if(e.event = 'alloc', b.alloc_ns, b.release_ns) as ts_ns,
    e.event,
    if(e.event = 'alloc', b.size_bytes, -b.size_bytes) as delta_bytes,
    if(e.event = 'alloc', b.alloc_total_allocated_bytes, b.release_total_allocated_bytes)
      as allocator_allocated_bytes,
    if(e.event = 'alloc', b.alloc_total_reserved_bytes, b.release_total_reserved_bytes)
      as allocator_reserved_bytes,
    b.name, b.size_bytes, b.stack_id, b.stack_source, b.origin_row,
    e.event = 'release' and b.release_inferred as release_inferred,
  from blocks as b
  cross join (values ('alloc'), ('release')) as e (event)
  where if(e.event = 'alloc', b.alloc_ns, b.release_ns) is not null
),

addressless as (
  select
    k.key_id, p.source_id, p.device, p.ts_ns, if(p.bytes > 0, 'alloc', 'release') as event,
    p.bytes as delta_bytes, p.total_allocated_bytes, p.total_reserved_bytes, p.op_name, abs(p.bytes) as size_bytes,
    o.attributed_stack_id, o.stack_source, p.event_index, false,
  from internal.torch_memory_pairs as p
  join _derive_keys as k using (run, role, rank_id, capture)
  left join _key_op_starts as o
    on k.key_id = o.key_id and p.tid = o.tid and p.op_ts_ns = o.ts_ns and p.op_name = o.name
  where p.addr is null and p.bytes <> 0 and p.ts_ns is not null
    and list_contains($runs, p.run) and list_contains($captures, p.capture)
),

events as (
  select * from block_events
  union all
  select * from addressless
),

-- Each device's running sum, streamed over all devices and less the devices before it,
-- as the Ascend timeline's.
running as (
  select
    *,
    sum(delta_bytes) over (
      order by key_id, device, internal.memory_event_order(ts_ns, event, origin_row) rows unbounded preceding
    ) as running_bytes,
  from events
),

device_totals as (
  select key_id, device, sum(delta_bytes) as bytes,
  from events
  group by key_id, device
),

device_starts as (
  select
    key_id, device,
    coalesce(sum(bytes) over (order by key_id, device rows between unbounded preceding and 1 preceding), 0)
      as bytes_before,
  from device_totals
),

timeline as (
  select r.*, (r.running_bytes - d.bytes_before)::bigint as live_bytes,
  from running as r
  join device_starts as d on r.key_id = d.key_id and r.device is not distinct from d.device
)

select
  k.run, k.role, k.rank_id, k.capture, 'torch' as source, 'epoch' as clock,
  t.source_id, t.device, 'torch' as allocator, t.ts_ns, t.event, t.delta_bytes,
  t.live_bytes, t.live_bytes as allocator_live_bytes,
  t.allocator_allocated_bytes, t.allocator_reserved_bytes, t.name, t.size_bytes, t.stack_id, t.stack_source,
  t.origin_row, t.release_inferred,
from timeline as t
join _derive_keys as k using (key_id)
;

-- A memory snapshot's timeline: one row per alloc and release of a block its device_traces
-- record (internal.snapshot_held_blocks), in internal.memory_event_order (time, releases first, then the
-- entry's position in the trace). Where the entries carry no time the clock is 'sequence':
-- ts_ns holds the entry's position, which orders that capture's events and nothing else.
-- live_bytes sums the traced blocks alone. allocator_live_bytes is what the allocator held:
-- the held blocks of the segments at snapshot time (internal.snapshot_held), replayed backwards
-- through every event of the trace, the frees of blocks allocated before recording
-- included (those frees are no rows: no block of the trace ends there). Trace entries
-- carry the requested size, segments the allocator's rounded block size, as PyTorch
-- writes them; rlwh takes both as written. Where segments and trace disagree the
-- reader says so in sources.
-- needs: snapshot_trace_blocks
insert into internal.memory_timeline_rows by name
with blocks as (
  select k.key_id, b.*
  from internal.snapshot_held_blocks as b
  join _derive_keys as k using (run, role, rank_id, capture)
  where list_contains($runs, b.run) and list_contains($captures, b.capture)
),

held_at_snapshot as (
  select k.key_id, s.device, sum(s.size_bytes)::bigint as held_bytes
  from snapshot_blocks as s
  join _derive_keys as k using (run, role, rank_id, capture)
  where internal.snapshot_held(s.state)
  group by k.key_id, s.device
),

events as (
  select
    b.key_id, b.source_id, b.device, b.clock,
    if(e.event = 'alloc', b.alloc_ns, b.release_ns) as ts_ns,
    e.event,
    if(e.event = 'alloc', b.size_bytes, -b.size_bytes) as delta_bytes,
    b.size_bytes, b.stack_id, if(b.stack_id is not null, 'allocation', null) as stack_source,
    b.alloc_seq as origin_row,
    if(e.event = 'alloc', b.alloc_seq, b.release_seq) as trace_position,
    e.event = 'release' and b.release_inferred as release_inferred,
    not b.allocated_before_recording as traced,
  from blocks as b
  cross join (values ('alloc'), ('release')) as e (event)
  where if(e.event = 'alloc', b.alloc_seq, b.release_seq) is not null
),

replayed as (
  select
    *,
    sum(if(traced, delta_bytes, 0)) over in_order as live_bytes,
    sum(delta_bytes) over in_order - sum(delta_bytes) over (partition by key_id, device) as change_to_snapshot,
  from events
  window in_order as (
    partition by key_id, device
    order by internal.memory_event_order(ts_ns, event, trace_position) rows unbounded preceding
  )
)

select
  k.run, k.role, k.rank_id, k.capture, 'snapshot' as source, r.clock,
  r.source_id, r.device, 'snapshot' as allocator, r.ts_ns, r.event, r.delta_bytes,
  r.live_bytes::bigint as live_bytes,
  (coalesce(h.held_bytes, 0) + r.change_to_snapshot)::bigint as allocator_live_bytes,
  null::bigint as allocator_allocated_bytes, null::bigint as allocator_reserved_bytes, null::varchar as name,
  r.size_bytes, r.stack_id, r.stack_source, r.origin_row, r.release_inferred,
from replayed as r
join _derive_keys as k using (key_id)
left join held_at_snapshot as h using (key_id, device)
where r.traced
;

drop table if exists _key_op_starts
;

drop table if exists _key_depths
;

drop table if exists _key_stack_levels
;

drop table if exists _key_op_stacks
