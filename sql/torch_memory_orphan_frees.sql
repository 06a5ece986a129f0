-- One row per (run, role, rank_id, capture, device): PyTorch frees whose allocation came
-- before the trace started (no allocation precedes them at their address). They are no
-- block of memory_blocks; this view says how many there were, so nothing is silently lost.
-- depends: internal.torch_memory_pairs
create or replace view torch_memory_orphan_frees (
  -- Run name.
  run,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Trace file the frees came from.
  capture,
  -- Device, e.g. cuda:0 or cpu.
  device,
  -- Frees with no earlier allocation at their address.
  orphan_frees,
  -- Bytes those frees released.
  orphan_freed_bytes
) as
with pairs as (
  select * from internal.torch_memory_pairs
),

final as (
  select run, role, rank_id, capture, device, count(*) as orphan_frees, (-sum(bytes))::bigint as orphan_freed_bytes
  from pairs
  where bytes < 0 and addr is not null and (previous_bytes is null or previous_bytes < 0)
  group by all
)

select * from final
