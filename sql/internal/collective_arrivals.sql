-- Every (collective instance, rank of its group) with the rank's raw start and end on its
-- own clock: the matching collectives describes (by recorded seq, else by order), before
-- clock_offsets aligns the ranks. Private helper of clock_offsets and collectives.
-- Only counted captures (internal.rank_captures): two profiling sessions of one rank never
-- match as one.
-- depends: internal.left_out_captures
create or replace view internal.collective_arrivals as
-- A recorded seq is the key only where it is one: no point-to-point op, and no rank of the
-- group holding a (group, seq) in two captures (a restarted process counts from 1 again);
-- else the whole group is matched by order.
with communication as (
  select
    run, role, rank_id, step, name, collective, "group", start_ns, end_ns, seq,
    coalesce(seq_is_global, false) and coalesce(collective, '') not in ('send', 'recv', 'sendrecv') as shared,
    min(capture) over same_seq <> max(capture) over same_seq as restarted,
  from device_ops
  anti join internal.left_out_captures using (run, capture)
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
)

select * from arrivals
