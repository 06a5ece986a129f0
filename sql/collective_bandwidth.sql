-- One row per (collective instance, rank) that ran it: how many bytes the rank's collective
-- moved and how fast, as a whole op (algbw_gbps, transfer_gbps) and on its link (link_gbps).
--
-- bytes is the element count the source records times the size of its data type (HCCL
-- count and data_type; Kineto's In msg nelems and dtype), NULL where the source records
-- either not, or a type this view does not know. Two rates: algbw_gbps over the rank's
-- whole stay in the collective (end_ns - arrive_ns, as nccl-tests' algorithm bandwidth
-- is over the op's time), and transfer_gbps over the time after the last rank arrived
-- (end_ns minus the instance's last arrive_ns, collectives' clocks): the waiting for late
-- ranks left out. Both are the op's rates, not a link's speed: an op that spends most of its
-- time waiting for other ranks, or in its own synchronisation, moves its bytes at a small
-- fraction of what its links do. link_gbps is the link's speed: the Ascend profiler's
-- bandwidth of the op's transfer tasks while they ran (collective_transfers: Transit Size /
-- Transit Time, communication.json's per-link figures), on the transport that carried most
-- of its bytes (HCCS, PCIE, SIO or RDMA; the SDMA and LOCAL sums only where no other is
-- recorded). bytes / ns is GB/s (10^9 bytes a second).
-- A mismatched instance (collectives.mismatched: not one operation) keeps its rows and
-- says so; its transfer rate means nothing.
-- depends: collectives, internal.left_out_captures
create or replace view collective_bandwidth (
  -- Run name.
  run,
  -- Role of the ranks.
  role,
  -- Step, as collectives has it.
  step,
  -- Collective op or kernel name.
  name,
  -- allreduce, allgather, ... (device_ops.collective).
  collective,
  -- Process group or HCCL group; NULL when the source names none.
  "group",
  -- As collectives: the instance's seq.
  seq,
  -- As collectives: whether seq is the source's own number.
  seq_is_global,
  -- Global rank.
  rank_id,
  -- Elements the rank's collective moved, as the source records them; NULL when it records none.
  element_count,
  -- Data type as the source spells it (FP32, Float, BFloat16, ...).
  data_type,
  -- Bytes of one element of data_type; NULL for a type this view does not know.
  element_bytes,
  -- element_count x element_bytes.
  bytes,
  -- The rank's stay in the collective, end_ns - arrive_ns, ns.
  duration_ns,
  -- end_ns minus the instance's last arrival, ns: the time all ranks were in it; NULL when negative (clocks or match off).
  transfer_ns,
  -- bytes / duration_ns, GB/s: the op's algorithm bandwidth (nccl-tests' algbw) over its whole stay, waiting included; not a link speed.
  algbw_gbps,
  -- bytes / transfer_ns, GB/s: the op's rate once every rank had arrived; not a link speed either.
  transfer_gbps,
  -- The transport that carried most of the op's bytes on this rank (collective_transfers); NULL where the profiler recorded none (Kineto).
  link_transport,
  -- The profiler's bandwidth on link_transport while the op's transfer tasks ran (collective_transfers.bandwidth_gbps: Transit Size / Transit Time, as communication.json), GB/s: the link's speed.
  link_gbps,
  -- collectives.mismatched: the instance was not one operation.
  mismatched
) as
with sizes as (
  -- Type names as the sources spell them, lowercased: HCCL's (FP32, BFP16 in the db export's
  -- ENUM_HCCL_DATA_TYPE, INT128) and PyTorch's (Float, BFloat16, Half, Long).
  select * from (values
    ('int128', 16), ('fp64', 8), ('double', 8), ('float64', 8), ('int64', 8), ('long', 8), ('uint64', 8),
    ('fp32', 4), ('float', 4), ('float32', 4), ('int32', 4), ('int', 4), ('uint32', 4),
    ('fp16', 2), ('half', 2), ('float16', 2), ('bf16', 2), ('bfp16', 2), ('bfloat16', 2), ('int16', 2), ('short', 2),
    ('uint16', 2), ('int8', 1), ('uint8', 1), ('char', 1), ('byte', 1), ('bool', 1), ('fp8', 1),
    ('float8_e4m3fn', 1), ('float8_e5m2', 1), ('hif8', 1)
  ) as v(data_type, element_bytes)
),

ops as (
  -- The rank's element count and type of the instance (its rows in device_ops, by time).
  select
    run, role, rank_id, coalesce("group", '') as g, name, start_ns,
    any_value(element_count) as element_count, any_value(data_type) as data_type,
  from device_ops
  anti join internal.left_out_captures using (run, capture)
  where kind = 'communication'
  group by all
),

-- Each op's main link on the rank: the most bytes, a link before the SDMA and LOCAL sums.
links as (
  select
    run, role, rank_id, step, name,
    arg_max(struct_pack(t := transport_type, g := bandwidth_gbps),
            struct_pack(is_link := coalesce(upper(transport_type) not in ('SDMA', 'LOCAL'), false),
                        b := coalesce(size_bytes, 0))) as link,
  from collective_transfers
  anti join internal.left_out_captures using (run, capture)
  group by all
),

instances as (
  select
    c.*,
    max(c.arrive_ns) over (partition by c.run, c.role, c.step, c."group", c.name, c.seq, c.seq_is_global)
      as last_arrive_ns,
  from collectives as c
  where c.arrive_ns is not null
),

final as (
  select
    i.run, i.role, i.step, i.name, i.collective, i."group", i.seq, i.seq_is_global, i.rank_id,
    o.element_count, o.data_type, z.element_bytes,
    o.element_count * z.element_bytes as bytes,
    i.end_ns - i.arrive_ns as duration_ns,
    case when i.end_ns >= i.last_arrive_ns then i.end_ns - i.last_arrive_ns end as transfer_ns,
    o.element_count * z.element_bytes / nullif(i.end_ns - i.arrive_ns, 0) as algbw_gbps,
    o.element_count * z.element_bytes / nullif(case when i.end_ns >= i.last_arrive_ns then i.end_ns - i.last_arrive_ns end, 0)
      as transfer_gbps,
    l.link.t as link_transport,
    l.link.g as link_gbps,
    i.mismatched,
  from instances as i
  left join ops as o
    on o.run = i.run and o.role = i.role and o.rank_id = i.rank_id and o.g = coalesce(i."group", '')
    and o.name = i.name and o.start_ns = i.arrive_ns + i.clock_offset_ns
  left join sizes as z on z.data_type = lower(o.data_type)
  left join links as l
    on l.run = i.run and l.role = i.role and l.rank_id = i.rank_id and l.name = i.name
    and l.step is not distinct from i.step
)

select * from final
