-- One row per (run, role, rank) that ran collectives: how far the rank's clock is from the
-- role's reference rank (its lowest rank_id), estimated from the collectives themselves.
--
-- The ranks of one collective leave it at nearly the same instant (it cannot finish on
-- any rank before the last one has joined), so at each instance the rank shares with the
-- reference, its end minus the reference's end is its clock offset plus noise. offset_ns
-- is the median of those differences; end_spread_ns, the largest distance of one of them
-- from the median, bounds what the offset leaves unexplained.
--
-- The rule for aligning: a role's clocks are aligned only where its raw times are
-- impossible and the offsets explain it. Impossible: at some instance a rank's collective
-- ended before another rank's started (impossible_instances). Explained: shifted by their
-- offsets, the role's ranks are impossible at fewer than half as many instances
-- (impossible_after_shift). Then every rank of the role is shifted by its offset
-- (applied_offset_ns = offset_ns) and collectives reports arrivals on the reference rank's
-- clock. Elsewhere times stay as recorded (applied_offset_ns = 0): where they are possible
-- the collectives cannot tell skew from lateness, and where a shift leaves them impossible
-- the instances disagree by more than any one offset (ops matched wrongly, e.g. sends and
-- receives paired by order), which collectives flags (wait_capped) instead.
-- depends: internal.collective_arrivals
create or replace view clock_offsets (
  -- Run name.
  run,
  -- Role (collectives match within a role).
  role,
  -- Global rank.
  rank_id,
  -- The rank whose clock the others are measured against: the role's lowest rank_id with collectives.
  reference_rank,
  -- Collective instances this rank and the reference rank both ran: the evidence.
  instances,
  -- Median over those instances of this rank's end_ns minus the reference's, ns: how far ahead this rank's clock reads (0 for the reference).
  offset_ns,
  -- Largest distance of one instance's end difference from offset_ns, ns: how much of the ends' disagreement the offset leaves unexplained.
  end_spread_ns,
  -- Instances where, on the raw clocks, this rank's collective ended before another rank's started, or started after another's ended: proof the clocks disagree.
  impossible_instances,
  -- Of those, the instances still impossible once every rank of the role is shifted by its offset_ns.
  impossible_after_shift,
  -- True when the role's clocks are aligned: its ranks have impossible instances, and the shift leaves fewer than half of them (summed over the role's ranks).
  aligned,
  -- The shift collectives subtracts from this rank's times, ns: offset_ns where aligned, else 0.
  applied_offset_ns,
  -- offset_ns / 1e6.
  offset_ms
) as
with arrivals as (
  select *,
    max(arrive_ns) over instance as last_arrive_ns,
    min(end_ns) over instance as first_end_ns,
  from internal.collective_arrivals
  where arrive_ns is not null
  window instance as (partition by run, role, step, "group", name, seq, seq_is_global)
),

reference as (
  select run, role, min(rank_id) as reference_rank from arrivals group by run, role
),

paired as (
  select a.run, a.role, a.rank_id, r.reference_rank, a.end_ns - b.end_ns as end_diff_ns
  from arrivals as a
  join reference as r on a.run = r.run and a.role = r.role
  join arrivals as b
    on b.run = a.run and b.role = a.role and b.rank_id = r.reference_rank
    and (b.step = a.step or (b.step is null and a.step is null))
    and (b."group" = a."group" or (b."group" is null and a."group" is null))
    and b.name = a.name and b.seq = a.seq and b.seq_is_global = a.seq_is_global
),

estimates as (
  select run, role, rank_id, any_value(reference_rank) as reference_rank, count(*) as instances,
    quantile_disc(end_diff_ns, 0.5) as offset_ns,
  from paired
  group by run, role, rank_id
),

spreads as (
  select p.run, p.role, p.rank_id, max(abs(p.end_diff_ns - e.offset_ns)) as end_spread_ns
  from paired as p
  join estimates as e on p.run = e.run and p.role = e.role and p.rank_id = e.rank_id
  group by p.run, p.role, p.rank_id
),

shifted as (
  select a.*,
    max(a.arrive_ns - e.offset_ns) over instance as last_shifted_arrive_ns,
    min(a.end_ns - e.offset_ns) over instance as first_shifted_end_ns,
    a.arrive_ns - e.offset_ns as shifted_arrive_ns, a.end_ns - e.offset_ns as shifted_end_ns,
  from arrivals as a
  join estimates as e on a.run = e.run and a.role = e.role and a.rank_id = e.rank_id
  window instance as (partition by a.run, a.role, a.step, a."group", a.name, a.seq, a.seq_is_global)
),

evidence as (
  select run, role, rank_id,
    count(*) filter (where end_ns < last_arrive_ns or arrive_ns > first_end_ns) as impossible_instances,
    count(*) filter (
      where shifted_end_ns < last_shifted_arrive_ns or shifted_arrive_ns > first_shifted_end_ns
    ) as impossible_after_shift,
  from shifted
  group by run, role, rank_id
),

final as (
  select
    e.run, e.role, e.rank_id, e.reference_rank, e.instances, e.offset_ns,
    s.end_spread_ns,
    v.impossible_instances, v.impossible_after_shift,
    coalesce(sum(v.impossible_instances) over role_ranks > 0
      and sum(v.impossible_after_shift) over role_ranks * 2 < sum(v.impossible_instances) over role_ranks, false)
      as aligned,
  from estimates as e
  join spreads as s on e.run = s.run and e.role = s.role and e.rank_id = s.rank_id
  join evidence as v on e.run = v.run and e.role = v.role and e.rank_id = v.rank_id
  window role_ranks as (partition by e.run, e.role)
)

select
  *, case when aligned then offset_ns else 0 end as applied_offset_ns, offset_ns / 1e6 as offset_ms,
from final
