-- Rules the memory views and the derived memory tables (ingest/derived/memory.sql) share,
-- each written once, as DuckDB macros. Private.
--
-- internal.memory_event_order: the order of memory events on one device. Time first; at equal
-- times releases before allocations (a block freed and another allocated in the same ns
-- never count together); then the event's position in its source (`pos` < 2^40).
-- One HUGEINT, because DuckDB's window sorts one such key several times faster than three
-- columns.
create or replace macro internal.memory_event_order(ts_ns, event, pos) as
  ts_ns::hugeint * 2199023255552 + (event = 'alloc')::hugeint * 1099511627776 + pos;

-- internal.ascend_allocator: which allocator made an operator_memory.csv block. 'GE' (the graph
-- engine) for cann::* rows, which carry GE's own totals; 'PTA' (torch_npu's caching
-- allocator) for the rest, which carry the PyTorch allocator's.
create or replace macro internal.ascend_allocator(name) as
  case when starts_with(name, 'cann::') then 'GE' else 'PTA' end;

-- internal.snapshot_time: a memory snapshot's trace time. Epoch ns where every trace entry records
-- time_us ('epoch'), else the entry's position in its device trace ('sequence'), which
-- orders that capture's events and is no time.
create or replace macro internal.snapshot_time(clock, ns, pos) as
  case when clock = 'epoch' then ns else pos end;

-- internal.snapshot_held: a snapshot block state whose memory the allocator still holds at
-- snapshot time: allocated, or freed by the program while a stream still uses it (its
-- free_completed is still to come, the event that ends a block in the trace).
create or replace macro internal.snapshot_held(state) as
  state in ('active_allocated', 'active_pending_free');
