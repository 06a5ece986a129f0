-- One row per (collective instance, rank of its group): when each rank reached a
-- collective and how long it then waited for the last one to arrive.
--
-- An instance is one collective run by every rank of its group. Where the source numbers
-- a group's collectives alike on every rank (device_ops.seq_is_global: Kineto's Seq), an
-- instance is its (group, seq) on every rank. Elsewhere (HCCL and older NCCL traces
-- number ops per rank only; point-to-point ops are never matched by a recorded seq, nor a
-- group where a rank's seq repeats in two captures: a restarted process) they are matched
-- by order: the k-th collective of a (group, name) in a step on one rank meets
-- the k-th on every other rank of the role. The group's ranks are the role's ranks that
-- ran any collective of that group in the run; a rank that has no row for an instance (it
-- never reached it, or its capture stopped) still gets a row, with arrive_ns NULL.
--
-- arrive_ns is the start of the rank's collective on the device: a collective op cannot
-- finish before every rank has joined, so the early ranks sit in it until the last one
-- arrives, and their ends line up.
create or replace view collectives (
  -- Run name.
  run,
  -- Role of the ranks.
  role,
  -- Step (device_ops.step: the profiler's step, else the layout's); for an instance matched by its recorded seq, the earliest step any rank ran it in.
  step,
  -- Collective op or kernel name (hcom_allReduce__586_0_1, ncclKernel_AllReduce_...); for an instance matched by its recorded seq, the first name its ranks ran it under.
  name,
  -- allreduce, allgather, reducescatter, broadcast, alltoall, sendrecv, ... (device_ops.collective).
  collective,
  -- Process group or HCCL group as the source names it; NULL when it names none.
  "group",
  -- The source's sequence number of the collective in its group where every rank records one (device_ops.seq_is_global), else the instance's order among the step's collectives of this group and name (1 = first).
  seq,
  -- True when seq is the source's own number, shared by the ranks (the instance was matched by it); false when it is the order within the step. With step, group, name and seq it names the instance.
  seq_is_global,
  -- Global rank.
  rank_id,
  -- When the rank's collective started on the device, ns since the epoch; NULL when the rank never ran this instance.
  arrive_ns,
  -- When the rank's collective ended on the device, ns since the epoch; NULL when never run.
  end_ns,
  -- How long this rank waited for the last arrival: the last arrive_ns of the instance minus this one, ns.
  wait_ns,
  -- True for the rank that arrived last (every tied last arrival); false for others and for a rank that never ran it.
  is_last
) as
-- A recorded seq is the key only where it is one: no point-to-point op, and no rank of the
-- group holding a (group, seq) in two captures (a restarted process counts from 1 again);
-- else the whole group is matched by order.
with communication as (
  select
    run, role, rank_id, step, name, collective, "group", start_ns, end_ns, seq,
    coalesce(seq_is_global, false) and coalesce(collective, '') not in ('send', 'recv', 'sendrecv') as shared,
    min(capture) over same_seq <> max(capture) over same_seq as restarted,
  from device_ops
  where kind = 'communication'
  window same_seq as (partition by run, role, rank_id, "group", seq)
),

classified as (
  select
    *,
    shared and not coalesce(bool_or(shared and restarted) over (partition by run, role, "group"), false) as by_seq,
  from communication
),

-- The instance key of each row: (group, seq) where the source's seq is shared by the
-- ranks; else (step, group, name, order in them). key_step and key_name are NULL in the first case.
keyed as (
  select
    run, role, rank_id, step, name, collective, "group", start_ns, end_ns, by_seq,
    case when by_seq then null else step end as key_step,
    case when by_seq then null else name end as key_name,
    case when by_seq then seq else row_number() over (
      partition by run, role, rank_id, step, "group", name, by_seq order by start_ns, end_ns
    ) end as key_seq,
  from classified
),

-- One row per (rank, instance): a recorded seq a rank ran as several kernels counts from the first start to the last end.
ops as (
  select
    run, role, rank_id, "group", by_seq, key_step, key_name, key_seq,
    min(step) as step, min(name) as name, any_value(collective) as collective,
    min(start_ns) as start_ns, max(end_ns) as end_ns,
  from keyed
  group by run, role, rank_id, "group", by_seq, key_step, key_name, key_seq
),

instances as (
  select
    run, role, "group", by_seq, key_step, key_name, key_seq,
    min(step) as step, min(name) as name, any_value(collective) as collective,
  from ops
  group by run, role, "group", by_seq, key_step, key_name, key_seq
),

members as (
  select distinct run, role, "group", rank_id from ops
),

expected as (
  select i.*, m.rank_id
  from instances as i
  join members as m
    on i.run = m.run and i.role = m.role and (i."group" = m."group" or (i."group" is null and m."group" is null))
),

arrivals as (
  select
    e.run, e.role, e.step, e.name, e.collective, e."group", e.key_seq as seq, e.by_seq as seq_is_global, e.rank_id,
    o.start_ns as arrive_ns, o.end_ns,
  from expected as e
  left join ops as o
    on e.run = o.run and e.role = o.role and e.rank_id = o.rank_id and (e."group" = o."group" or (e."group" is null and o."group" is null))
    and e.by_seq = o.by_seq and (e.key_step = o.key_step or (e.key_step is null and o.key_step is null))
    and (e.key_name = o.key_name or (e.key_name is null and o.key_name is null)) and e.key_seq = o.key_seq
),

final as (
  select
    run, role, step, name, collective, "group", seq, seq_is_global, rank_id, arrive_ns, end_ns,
    max(arrive_ns) over instance - arrive_ns as wait_ns,
    coalesce(arrive_ns = max(arrive_ns) over instance, false) as is_last,
  from arrivals
  window instance as (partition by run, role, step, "group", name, seq, seq_is_global)
)

select * from final
