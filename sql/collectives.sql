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
--
-- Clocks: ranks on different hosts disagree by milliseconds. Where clock_offsets found the
-- role's raw times impossible (a collective ended on one rank before another rank had
-- arrived), every rank's arrive_ns and end_ns are shifted onto the reference rank's clock
-- by its offset (clock_offset_ns, subtracted); elsewhere they are the rank's own, unshifted.
-- A wait is never longer than the collective the rank waited in: wait_ns is the last
-- arrival minus this one, at most this rank's own duration (end_ns - arrive_ns), and
-- wait_capped says where the arrivals asked for more (the clocks or the match are wrong
-- there: never blame a rank for it). An instance whose ranks left it further apart than
-- its largest wait and than its shortest stay (max end_ns - min end_ns above both the last
-- arrival minus the first and the least end_ns - arrive_ns) is not one operation (ops
-- paired wrongly, e.g. sends and receives matched by order): mismatched says so, and
-- stragglers charges no rank for it.
-- depends: internal.collective_arrivals, clock_offsets
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
  -- When the rank's collective started on the device, ns since the epoch (on the reference rank's clock where the role's clocks are aligned); NULL when the rank never ran this instance.
  arrive_ns,
  -- When the rank's collective ended on the device, ns since the epoch (aligned like arrive_ns); NULL when never run.
  end_ns,
  -- How long this rank waited for the last arrival: the last arrive_ns of the instance minus this one, at most this rank's own duration, ns.
  wait_ns,
  -- True for the rank that arrived last (every tied last arrival); false for others and for a rank that never ran it.
  is_last,
  -- What was subtracted from this rank's times to align its clock (clock_offsets.applied_offset_ns); 0 where the role is not aligned.
  clock_offset_ns,
  -- True where the last arrival minus this one was longer than this rank's collective lasted: wait_ns is capped at the duration, and the instance says nothing about who was late.
  wait_capped,
  -- True when the instance's ranks ended further apart than its largest wait and than its shortest stay: not one operation, never charged to a rank (stragglers).
  mismatched
) as
with raw as (
  select * from internal.collective_arrivals
),

aligned as (
  select
    r.run, r.role, r.step, r.name, r.collective, r."group", r.seq, r.seq_is_global, r.rank_id,
    coalesce(o.applied_offset_ns, 0) as clock_offset_ns,
    r.arrive_ns - coalesce(o.applied_offset_ns, 0) as arrive_ns,
    r.end_ns - coalesce(o.applied_offset_ns, 0) as end_ns,
  from raw as r
  left join clock_offsets as o on r.run = o.run and r.role = o.role and r.rank_id = o.rank_id
),

waits as (
  select
    *,
    max(arrive_ns) over instance - arrive_ns as full_wait_ns,
    coalesce(arrive_ns = max(arrive_ns) over instance, false) as is_last,
    coalesce(max(end_ns) over instance - min(end_ns) over instance
      > greatest(max(arrive_ns) over instance - min(arrive_ns) over instance, min(end_ns - arrive_ns) over instance),
      false) as mismatched,
  from aligned
  window instance as (partition by run, role, step, "group", name, seq, seq_is_global)
),

final as (
  select
    run, role, step, name, collective, "group", seq, seq_is_global, rank_id, arrive_ns, end_ns,
    least(full_wait_ns, end_ns - arrive_ns) as wait_ns,
    is_last, clock_offset_ns,
    coalesce(full_wait_ns > end_ns - arrive_ns, false) as wait_capped,
    mismatched,
  from waits
)

select * from final
