-- One row per (run, role, step) with collectives: the rank the others waited for.
--
-- The rule: at each collective instance (see collectives) the last rank to arrive is
-- charged with the time every other rank waited for it (the last arrival minus theirs,
-- summed over the other ranks); ties for last go to the lowest rank_id.
--
-- Instances left out (charged to nobody, counted in left_out): a mismatched one, whose
-- ranks did not run one operation, and one where a rank's wait would be longer than its
-- own stay in the collective (collectives.wait_capped). On one clock that cannot happen:
-- the clocks disagree there even after clock_offsets' correction (or it found no single
-- offset), and the arrivals say nothing about who was late, as collectives documents. The straggler is
-- the rank charged the most in the step (ties: lowest rank_id). A rule on lateness alone
-- misleads: once the first collective has brought the ranks together, later arrivals
-- differ by microseconds of noise and clock offset, and name another rank each time.
-- is_straggler: waited_for_ns is above [thresholds] straggler_wait_ms of warehouse.toml
-- (default 1 ms), stored in internal.settings as straggler_wait_ns.
-- depends: collectives
create or replace view stragglers (
  -- Run name.
  run,
  -- Role.
  role,
  -- Step (the profiler's, else the layout's).
  step,
  -- The rank charged with the most waiting in the step.
  rank_id,
  -- Total time the other ranks waited for it at the collectives where it arrived last, ns.
  waited_for_ns,
  -- How late it arrived at the step's first collective instance (the one that started first): its arrive_ns minus the earliest arrival there, ns.
  late_ns,
  -- At how many of the step's collective instances it arrived last.
  last_at,
  -- Collective instances in the step that were charged (left_out not counted).
  collectives,
  -- Collective instances in the step charged to nobody: mismatched (not one operation), or a rank's wait would exceed its own stay in the collective (clocks that disagree, wait_capped).
  left_out,
  -- Ranks that took part in the step's collectives.
  ranks,
  -- waited_for_ns / 1e6.
  waited_for_ms,
  -- True when waited_for_ns is above the threshold ([thresholds] straggler_wait_ms, default 1 ms).
  is_straggler
) as
with collective_rows as materialized (
  -- collectives, a deep view, used three times below: planned and computed once.
  select * from collectives
),

every_instance as (
  select
    run, role, step, "group", name, seq, seq_is_global,
    sum(wait_ns) as waited_ns,
    arg_min(rank_id, struct_pack(neg := -arrive_ns, r := rank_id)) filter (where arrive_ns is not null) as last_rank,
    min(arrive_ns) as first_arrive_ns,
    bool_or(mismatched) or bool_or(coalesce(wait_capped, false)) as is_left_out,
  from collective_rows
  group by run, role, step, "group", name, seq, seq_is_global
),

instances as (
  select * from every_instance where not is_left_out
),

left_out as (
  select run, role, step, count(*) filter (where is_left_out) as left_out
  from every_instance
  group by run, role, step
),

charged as (
  select run, role, step, last_rank as rank_id, sum(waited_ns)::bigint as waited_for_ns, count(*) as last_at
  from instances
  where last_rank is not null
  group by run, role, step, last_rank
),

steps as (
  select l.run, l.role, l.step, count(i.run) as collectives, any_value(l.left_out) as left_out
  from left_out as l
  left join instances as i on l.run = i.run and l.role = i.role and (l.step = i.step or (l.step is null and i.step is null))
  group by l.run, l.role, l.step
),

first_instance as (
  select run, role, step,
    arg_min(struct_pack(g := "group", n := name, s := seq, k := seq_is_global), first_arrive_ns) as first,
  from instances
  group by run, role, step
),

first_arrivals as (
  select c.run, c.role, c.step, c.rank_id, c.arrive_ns - min(c.arrive_ns) over (partition by c.run, c.role, c.step) as late_ns
  from collective_rows as c
  join first_instance as f
    on c.run = f.run and c.role = f.role and (c.step = f.step or (c.step is null and f.step is null))
    and (c."group" = f.first.g or (c."group" is null and f.first.g is null)) and c.name = f.first.n and c.seq = f.first.s
    and c.seq_is_global = f.first.k
),

step_ranks as (
  select run, role, step, count(distinct rank_id) as ranks
  from collective_rows
  group by run, role, step
),

picked as (
  select
    s.run, s.role, s.step, s.collectives, s.left_out,
    arg_max(c.rank_id, struct_pack(w := c.waited_for_ns, r := -c.rank_id)) as rank_id,
  from steps as s
  left join charged as c on s.run = c.run and s.role = c.role and (s.step = c.step or (s.step is null and c.step is null))
  group by s.run, s.role, s.step, s.collectives, s.left_out
),

threshold as (
  select coalesce(
    (select try_cast(max(value) as bigint) from internal.settings where name = 'straggler_wait_ns'), 1000000
  ) as wait_ns
),

final as (
  select
    p.run, p.role, p.step, p.rank_id,
    coalesce(c.waited_for_ns, 0) as waited_for_ns,
    a.late_ns,
    coalesce(c.last_at, 0) as last_at,
    p.collectives,
    p.left_out,
    r.ranks,
    coalesce(c.waited_for_ns, 0) / 1e6 as waited_for_ms,
    coalesce(c.waited_for_ns, 0) > (select wait_ns from threshold) as is_straggler,
  from picked as p
  left join charged as c
    on p.run = c.run and p.role = c.role and (p.step = c.step or (p.step is null and c.step is null)) and p.rank_id = c.rank_id
  left join first_arrivals as a
    on p.run = a.run and p.role = a.role and (p.step = a.step or (p.step is null and a.step is null)) and p.rank_id = a.rank_id
  left join step_ranks as r on p.run = r.run and p.role = r.role and (p.step = r.step or (p.step is null and r.step is null))
)

select * from final
