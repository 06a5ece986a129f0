-- Every block a PyTorch memory snapshot's allocator held while its trace ran, one row each,
-- on the capture's clock. Private: memory_blocks and the snapshot timeline
-- (ingest/derived/memory.sql) read it. Three kinds of block:
-- - the blocks device_traces record: an alloc paired with the free_completed of its
--   address, or ended by the next alloc there (release_inferred); still held at snapshot
--   time when there is neither;
-- - blocks allocated before recording began and freed while it ran: a free_completed with
--   no alloc before it (the free's frames are not the allocation's, so no stack);
-- - blocks allocated before recording began and still held at snapshot time: the
--   segments' held blocks (internal.snapshot_held) at whose address the trace leaves none of its
--   own, with the stack the segments' block carries (none where history recording began
--   after the allocation). Model weights and optimizer state are typically these.
-- alloc_ns and release_ns are epoch ns where the trace records time, else positions in
-- the trace (clock 'sequence'); alloc_ns is NULL for a block allocated before recording,
-- release_ns NULL for one still held. alloc_seq / release_seq are the trace positions.
-- depends: internal.memory_rules
create or replace view internal.snapshot_held_blocks as
with traced as (
  select * from snapshot_trace_blocks
),

held_at_snapshot as (
  select * from snapshot_blocks where internal.snapshot_held(state)
),

clocks as (
  select run, role, rank_id, capture, device, any_value(clock) as clock
  from traced
  group by run, role, rank_id, capture, device
),

trace_blocks as (
  select
    run, role, rank_id, capture, source_id, device, clock, addr as address,
    alloc_seq, release_seq,
    internal.snapshot_time(clock, alloc_ns, alloc_seq) as alloc_ns,
    internal.snapshot_time(clock, release_ns, release_seq) as release_ns,
    size_bytes, stack_id,
    coalesce(release_action = 'alloc', false) as release_inferred,
    alloc_seq is null as allocated_before_recording,
  from traced
),

segment_blocks as (
  select
    h.run, h.role, h.rank_id, h.capture, h.source_id, h.device, coalesce(c.clock, 'sequence') as clock,
    h.address, null::bigint as alloc_seq, null::bigint as release_seq,
    null::bigint as alloc_ns, null::bigint as release_ns,
    h.size_bytes, h.stack_id, false as release_inferred, true as allocated_before_recording,
  from held_at_snapshot as h
  left join clocks as c using (run, role, rank_id, capture, device)
  anti join traced as t
    on h.run = t.run and h.role = t.role and h.rank_id = t.rank_id and h.capture = t.capture
    and h.device = t.device and h.address = t.addr
    and t.alloc_seq is not null and t.release_seq is null
),

final as (
  select * from trace_blocks
  union all
  select * from segment_blocks
)

select * from final
