-- One row per link between two ranks in one step (and op type and group): how fast it
-- moved the step's bytes, ranked slowest first within its (run, role, step).
--
-- The figures are the communication matrix's <type>-total entries (communication_links
-- where is_total: the profiler's sum over every op of that type and group in the step, on
-- that link); its top/middle/bottom entries are a selection of those ops, one op possibly
-- twice, so they are left out. The copy inside a device (src_rank = dst_rank, transport
-- LOCAL) is no link between ranks and is left out too.
-- The rule: slowness_rank numbers the step's links by bandwidth_gbps, lowest first (NULL
-- last; ties: rank_id, dst_rank, collective, group). Links of different transports differ
-- by nature (RDMA between nodes is slower than HCCS inside one), so each link is also ranked
-- among the step's links of its own transport (transport_rank), with that transport's
-- median bandwidth beside it: a link far below its transport's median is the slow one.
-- dst_rank_id: the matrix numbers ranks within the group; the receiver's global rank is the
-- rank whose own matrix of that group sends from dst_rank (msprof-analyze maps them alike);
-- NULL when that rank's matrix is not in the warehouse.
-- depends: internal.left_out_captures
create or replace view slowest_links (
  -- Run name.
  run,
  -- Role of the ranks.
  role,
  -- Step of the matrix entry (communication_links.step).
  step,
  -- 1 for the step's slowest link, 2 for the next, ...
  slowness_rank,
  -- Links ranked in the step (run, role, step).
  links,
  -- Global rank that sent over the link (the matrix file's rank).
  rank_id,
  -- Rank dir the matrix came from.
  capture,
  -- The op type the total is over (allreduce, allgather, send, ...: the label before -total).
  collective,
  -- HCCL group.
  "group",
  -- collective or p2p.
  op_kind,
  -- Sending rank as the matrix numbers it (within the group).
  src_rank,
  -- Receiving rank as the matrix numbers it (within the group).
  dst_rank,
  -- Receiving rank's global rank: the rank whose matrix of the group sends from dst_rank; NULL when none in the warehouse.
  dst_rank_id,
  -- Transport Type: HCCS or PCIE (devices of one node), RDMA (between nodes), SIO, SDMA.
  transport_type,
  -- Bytes the link moved for the op type in the step.
  size_bytes,
  -- Time the link spent moving them, ns.
  duration_ns,
  -- Bandwidth(GB/s) as the matrix records it.
  bandwidth_gbps,
  -- 1 for the slowest of the step's links of this transport type, 2 for the next, ...
  transport_rank,
  -- Links of this transport type in the step.
  transport_links,
  -- Median bandwidth_gbps of the step's links of this transport type.
  transport_median_gbps,
  -- bandwidth_gbps / transport_median_gbps: below 1, slower than the link's peers.
  of_transport_median
) as
with links as (
  select
    run, role, step, rank_id, capture, "group", op_kind, src_rank, dst_rank, transport_type,
    size_bytes, duration_ns, bandwidth_gbps,
    regexp_replace(name, '-total$', '', 'i') as collective,
  from communication_links
  anti join internal.left_out_captures using (run, capture)
  where is_total and src_rank <> dst_rank
),

senders as (
  -- Within a group the matrix of one global rank sends from one group rank.
  select run, role, "group", src_rank, any_value(rank_id) as rank_id
  from communication_links
  anti join internal.left_out_captures using (run, capture)
  group by run, role, "group", src_rank
  having count(distinct rank_id) = 1
),

ranked as (
  select
    l.*,
    s.rank_id as dst_rank_id,
    row_number() over (
      partition by l.run, l.role, l.step
      order by l.bandwidth_gbps asc nulls last, l.rank_id, l.dst_rank, l.collective, l."group"
    ) as slowness_rank,
    count(*) over (partition by l.run, l.role, l.step) as links,
    row_number() over (
      partition by l.run, l.role, l.step, l.transport_type
      order by l.bandwidth_gbps asc nulls last, l.rank_id, l.dst_rank, l.collective, l."group"
    ) as transport_rank,
    count(*) over (partition by l.run, l.role, l.step, l.transport_type) as transport_links,
    median(l.bandwidth_gbps) over (partition by l.run, l.role, l.step, l.transport_type)
      as transport_median_gbps,
  from links as l
  left join senders as s
    on s.run = l.run and s.role = l.role and s."group" is not distinct from l."group"
    and s.src_rank = l.dst_rank
),

final as (
  select
    run, role, step, slowness_rank, links, rank_id, capture, collective, "group", op_kind, src_rank, dst_rank,
    dst_rank_id, transport_type, size_bytes, duration_ns, bandwidth_gbps, transport_rank, transport_links,
    transport_median_gbps,
    bandwidth_gbps / nullif(transport_median_gbps, 0) as of_transport_median,
  from ranked
)

select * from final
