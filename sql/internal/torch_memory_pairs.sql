-- One row per PyTorch "[memory]" event with its neighbours at the same address: the
-- event before and after it in time order on the same (capture, device, addr), across
-- threads (Kineto writes events grouped by thread, and memory allocated on one thread is
-- often freed on another, e.g. the autograd thread). Ties in time keep file order. An
-- allocation ends at the event that follows it: a free (its release), or another
-- allocation at the same address (the allocator reused it, so the block was freed
-- unseen: its release is inferred). Events without an address pair with nothing.
-- Private helper of ingest/derived/memory.sql and torch_memory_orphan_frees.
create or replace view internal.torch_memory_pairs as
with events as (
  select
    *,
    -- PyTorch's DeviceType codes as PyTorch names the device: 0 CPU, 1 CUDA (ROCm
    -- builds too), 12 XPU, 13 MPS, 19 MTIA, 20 PrivateUse1 (the NPU under torch_npu).
    case
      when device_type = 0 or device_id < 0 then 'cpu'
      else case device_type when 1 then 'cuda' when 6 then 'cuda' when 12 then 'xpu' when 13 then 'mps'
        when 19 then 'mtia' when 20 then 'npu' else 'device' || device_type end || ':' || device_id
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
  window same_addr as (partition by run, role, rank_id, capture, device, addr order by ts_ns, event_index)
)

select * from final
