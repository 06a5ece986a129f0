-- One row per (collective instance, rank of its group): when each rank reached a
-- collective and how long it then waited for the last one to arrive.
--
-- An instance is one collective run by every rank of its group. The sources here record
-- no cross-rank sequence number (HCCL and older NCCL traces number ops per rank only), so
-- instances are matched by order: the k-th collective of a (group, name) in a step on one
-- rank meets the k-th on every other rank of the role. The group's ranks are the role's
-- ranks that ran any collective of that group in the run; a rank that has no k-th one
-- (it never reached it, or its capture stopped) still gets a row, with arrive_ns NULL.
--
-- arrive_ns is the start of the rank's collective on the device: a collective op cannot
-- finish before every rank has joined, so the early ranks sit in it until the last one
-- arrives, and their ends line up.
create or replace view collectives (
  -- Run name.
  run,
  -- Role of the ranks.
  role,
  -- Step (device_ops.step: the profiler's step, else the layout's).
  step,
  -- Collective op or kernel name (hcom_allReduce__586_0_1, ncclKernel_AllReduce_...).
  name,
  -- allreduce, allgather, reducescatter, broadcast, alltoall, sendrecv, ... (device_ops.collective).
  collective,
  -- Process group or HCCL group as the source names it; NULL when it names none.
  "group",
  -- The instance's order among the step's collectives of this group and name (1 = first).
  seq,
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
with ops as (
  select
    run, role, rank_id, step, name, collective, "group", start_ns, end_ns,
    row_number() over (
      partition by run, role, rank_id, step, "group", name order by start_ns, end_ns
    ) as seq,
  from device_ops
  where kind = 'communication'
),

instances as (
  select run, role, step, "group", name, seq, any_value(collective) as collective
  from ops
  group by run, role, step, "group", name, seq
),

members as (
  select distinct run, role, "group", rank_id from ops
),

expected as (
  select i.run, i.role, i.step, i.name, i.collective, i."group", i.seq, m.rank_id
  from instances as i
  join members as m
    on i.run = m.run and i.role = m.role and (i."group" = m."group" or (i."group" is null and m."group" is null))
),

arrivals as (
  select
    e.run, e.role, e.step, e.name, e.collective, e."group", e.seq, e.rank_id,
    o.start_ns as arrive_ns, o.end_ns,
  from expected as e
  left join ops as o
    on e.run = o.run and e.role = o.role and e.rank_id = o.rank_id and (e.step = o.step or (e.step is null and o.step is null))
    and (e."group" = o."group" or (e."group" is null and o."group" is null)) and e.name = o.name and e.seq = o.seq
),

final as (
  select
    run, role, step, name, collective, "group", seq, rank_id, arrive_ns, end_ns,
    max(arrive_ns) over instance - arrive_ns as wait_ns,
    coalesce(arrive_ns = max(arrive_ns) over instance, false) as is_last,
  from arrivals
  window instance as (partition by run, role, step, "group", name, seq)
)

select * from final
