-- One row per (run, role, rank_id, capture, device, call_stack_top, user_frame, name): the blocks live
-- at that rank's peak (allocated at or before peak_at_ns, released after it or never),
-- so "which call stack holds the memory at the peak" is one query. live_bytes adds up to
-- memory_peak.peak_live_bytes over a rank's rows.
-- depends: memory_peak, memory_blocks
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
  -- Innermost frame of the allocating call stack; NULL when unknown.
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
  -- Share of the rank's peak_live_bytes held by the group, 0..1.
  share_of_peak,
  -- Time of the peak, ns since the epoch.
  peak_at_ns,
  -- Innermost frame of the stack outside library code: the line of the user's code.
  user_frame
) as
with peaks as (
  select * from memory_peak
),

blocks as (
  select * from memory_blocks
),

live_at_peak as (
  select b.*, p.peak_at_ns, p.peak_live_bytes
  from blocks as b
  join peaks as p using (run, role, rank_id, capture, device)
  where b.alloc_ns <= p.peak_at_ns
    and (b.release_ns is null or b.release_ns > p.peak_at_ns)
),

final as (
  select
    run, role, rank_id, capture, device, call_stack_top, name,
    min(stack_id) as stack_id,
    count(*) as blocks,
    sum(size_bytes)::bigint as live_bytes,
    round(sum(size_bytes) / 1048576.0, 3) as live_mb,
    sum(size_bytes) / nullif(any_value(peak_live_bytes), 0) as share_of_peak,
    any_value(peak_at_ns) as peak_at_ns,
    user_frame,
  from live_at_peak
  group by run, role, rank_id, capture, device, call_stack_top, user_frame, name
)

select * from final
