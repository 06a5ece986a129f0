-- One row per PyTorch "[memory]" event with its neighbours at the same address: the
-- event before and after it in event order on the same (capture, device, addr). An
-- allocation is paired with the event that follows it when that one is a free.
-- Private helper of memory_blocks and torch_memory_orphan_frees.
create or replace view _torch_memory_pairs as
with events as (
  select
    *,
    -- PyTorch's DeviceType codes: 0 CPU, 1 CUDA, 12 XPU, 13 MPS, 20 PrivateUse1 (NPU).
    case
      when device_type = 0 or device_id < 0 then 'cpu'
      else case device_type when 1 then 'cuda' when 12 then 'xpu' when 13 then 'mps' when 20 then 'npu'
        else 'device' || device_type end || ':' || device_id
    end as device
  from torch_memory_events
),

final as (
  select
    *,
    lead(bytes) over same_addr as next_bytes,
    lead(ts_ns) over same_addr as next_ts_ns,
    lead(total_allocated_bytes) over same_addr as next_total_allocated_bytes,
    lead(total_reserved_bytes) over same_addr as next_total_reserved_bytes,
    lag(bytes) over same_addr as previous_bytes,
  from events
  window same_addr as (partition by run, role, rank_id, capture, device, addr order by event_index)
)

select * from final
