-- One row per (run, role, rank_id, capture, device, call_stack_top, user_frame, name,
-- allocated_before_recording): the blocks live at that rank's peak (allocated at or before
-- it, released after it or never), so "which call stack holds the memory at the peak" is
-- one query. For Ascend and PyTorch traces the peak is memory_peak's peak of live bytes,
-- and live_bytes adds up to peak_live_bytes over a rank's rows. For a memory snapshot it
-- is the allocator's peak (memory_peak.allocator_peak_at_ns: the first event, in the
-- timeline's order, that reached allocator_peak_bytes), and the rows hold the blocks its
-- trace allocated, each group with its stack, beside the blocks allocated before recording
-- began (allocated_before_recording): with their stacks where the segments' blocks carry
-- frames, else in one row with no stack. They add up to allocator_peak_bytes except for
-- the rounding of blocks the trace allocated and the segments still hold (trace entries
-- carry the requested size, segments the allocator's rounded size).
-- depends: memory_peak, memory_blocks, internal.snapshot_held_blocks, internal.stack_frames, internal.memory_rules
create or replace view memory_peak_breakdown (
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
  -- Innermost Python frame of the allocating call stack (native frames never stand for it); NULL when unknown.
  call_stack_top,
  -- Operator that allocated the blocks.
  name,
  -- A representative full stack id for the group (call_stacks.stack_id).
  stack_id,
  -- Blocks of the group live at the peak.
  blocks,
  -- Bytes of the group live at the peak.
  live_bytes,
  -- live_bytes in MiB.
  live_mb,
  -- Share of the peak held by the group, 0..1: of peak_live_bytes, or of allocator_peak_bytes for a memory snapshot.
  share_of_peak,
  -- Time of the peak, ns since the epoch (a trace position where the snapshot's clock is 'sequence').
  peak_at_ns,
  -- Innermost Python frame of the stack outside library code: the line of the user's code.
  user_frame,
  -- True for a memory snapshot's blocks allocated before its trace began recording.
  allocated_before_recording
) as
with peaks as (
  select * from memory_peak
),

traced_sources as (
  select * from memory_blocks where source <> 'snapshot'
),

live_in_traces as (
  select b.*, p.peak_at_ns, p.peak_live_bytes as peak_bytes
  from traced_sources as b
  join peaks as p using (run, role, rank_id, capture, device)
  where b.alloc_ns <= p.peak_at_ns
    and (b.release_ns is null or b.release_ns > p.peak_at_ns)
),

snapshot_peaks as (
  -- The first snapshot event, in the timeline's order, at which the allocator peaked.
  select
    t.run, t.role, t.rank_id, t.capture, t.device,
    min(internal.memory_event_order(t.ts_ns, t.event, t.origin_row)) as peak_order,
    any_value(p.allocator_peak_at_ns) as peak_at_ns, any_value(p.allocator_peak_bytes) as peak_bytes,
  from internal.memory_timeline_rows as t
  join peaks as p using (run, role, rank_id, capture, device)
  where t.source = 'snapshot'
    and t.ts_ns = p.allocator_peak_at_ns and t.allocator_live_bytes = p.allocator_peak_bytes
  group by t.run, t.role, t.rank_id, t.capture, t.device
),

live_in_snapshots as (
  select
    b.run, b.role, b.rank_id, b.capture, b.device, 'snapshot' as source, b.alloc_seq as origin_row,
    null::varchar as name, b.alloc_ns, b.release_ns, b.size_bytes, b.stack_id, f.top_frame as call_stack_top,
    null::bigint as alloc_total_allocated_bytes, null::bigint as alloc_total_reserved_bytes,
    null::bigint as release_total_allocated_bytes, null::bigint as release_total_reserved_bytes,
    'snapshot' as allocator, b.release_inferred,
    case when b.stack_id is not null then 'allocation' else null end as stack_source, f.user_frame, b.clock,
    b.allocated_before_recording, p.peak_at_ns, p.peak_bytes,
  from internal.snapshot_held_blocks as b
  join snapshot_peaks as p using (run, role, rank_id, capture, device)
  left join internal.stack_frames as f on b.stack_id = f.stack_id
  where (b.alloc_seq is null or internal.memory_event_order(b.alloc_ns, 'alloc', b.alloc_seq) <= p.peak_order)
    and (b.release_seq is null or internal.memory_event_order(b.release_ns, 'release', b.release_seq) > p.peak_order)
),

live_at_peak as (
  select * from live_in_traces
  union all by name
  select * from live_in_snapshots
),

final as (
  select
    run, role, rank_id, capture, device, call_stack_top, name,
    min(stack_id) as stack_id,
    count(*) as blocks,
    sum(size_bytes)::bigint as live_bytes,
    round(sum(size_bytes) / 1048576.0, 3) as live_mb,
    sum(size_bytes) / nullif(any_value(peak_bytes), 0) as share_of_peak,
    any_value(peak_at_ns) as peak_at_ns,
    user_frame,
    allocated_before_recording,
  from live_at_peak
  group by run, role, rank_id, capture, device, call_stack_top, user_frame, name, allocated_before_recording
)

select * from final
