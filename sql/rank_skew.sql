-- One row per (run, role, rank_id): how long the rank spent in the role and its peak
-- memory, against the role's median rank. Stragglers and outliers at a glance.
--
-- Spans are compared like with like: a role's ranks are compared on one kind of span,
-- span_source (NVTX or MSTX ranges named after the role, the profiler's per-step times of
-- step_times, Ascend capture windows, PyTorch trace windows or NVTX export windows) on one
-- clock, the kind most of the role's ranks have (ties: nvtx, mstx, step_times, then
-- windows). Every rank of an Ascend job writes step_trace_time.csv, even ranks that keep
-- nothing else, so step_times lets all of them be compared; a rank's step_times span is
-- the sum of its steps' stage time.
-- A rank's span_ns is the sum of its spans of that kind only, so an Ascend window is never
-- added to a PyTorch window, nor an nsys-session span to an epoch one; a rank without
-- that kind has span_ns NULL and is not compared.
--
-- The rule: the reference is the role's median rank, the middle value, and the lower of
-- the two middle values for an even count (the median of 2 ranks is the smaller). A rank
-- is a straggler when its span is more than 10% above the reference span, and a memory
-- outlier when its peak is more than 10% away from the reference peak (either way). So
-- with 2 ranks only the slower one can be a straggler and only the one with the larger
-- peak an outlier (the smaller is the reference): a 2-rank role is flagged only when its
-- ranks really differ, and never both of them. With 1 rank nothing is flagged.
--
-- is_straggler: a rank whose span is longest is often the one that waited, not the one
-- waited for; so where the role's ranks ran collectives (device_ops), the straggler is the
-- rank the stragglers view charges with the others' waiting, and the span rule above
-- decides only for roles without collectives.
--
-- A rank's figures count each of its captures once and never add two profiling sessions:
-- where one profiler captured the same (run, role, rank_id, step) several times, only the
-- latest capture counts (the rule of internal.rank_captures), and left_out_captures names
-- the others (a capture that names no role, on every role of its rank).
-- Their rows stay in device_time, memory_peak and role_timeline, per capture.
-- depends: role_timeline, memory_peak, stragglers, internal.left_out_captures, internal.rank_captures
create or replace view rank_skew (
  -- Run name.
  run,
  -- Role.
  role,
  -- Global rank.
  rank_id,
  -- Ranks of the role in the run.
  role_ranks,
  -- Time the rank spent in the role, ns: the sum of its role_timeline spans of span_source; NULL when it has none.
  span_ns,
  -- The reference span: the median span_ns over the role's ranks (the lower middle value for an even count).
  median_span_ns,
  -- span_ns / median_span_ns.
  span_vs_median,
  -- True when the others waited for this rank: where the role's ranks ran collectives, the stragglers view names it with is_straggler in at least one step (straggler_rule 'collectives'); where they ran none, span_vs_median > 1.1 (straggler_rule 'span_vs_median').
  is_straggler,
  -- Which rule set is_straggler: 'collectives' (who the others waited for, from stragglers) or 'span_vs_median' (the role has no collectives: time spent against the median rank).
  straggler_rule,
  -- Highest live bytes of the rank in the role (over its captures and devices); for a memory snapshot, memory_peak.allocator_peak_bytes (what its allocator held, blocks from before recording included; from its segments where its trace allocated nothing).
  peak_live_bytes,
  -- The reference peak: the median peak_live_bytes over the role's ranks (the lower middle value for an even count).
  median_peak_live_bytes,
  -- peak_live_bytes / median_peak_live_bytes.
  peak_vs_median,
  -- True when peak_vs_median is above 1.1 or below 0.9.
  is_memory_outlier,
  -- The kind of span the role's ranks are compared on: nvtx, mstx (ranges named after the role), step_times, window:ascend, window:torch, window:nvtx (what an NVTX export's phase ranges cover) or window:other.
  span_source,
  -- Clock of those spans: epoch or nsys_session; NULL for step_times (durations the profiler measured).
  span_clock,
  -- The rank's captures this row leaves out, comma-separated in path order: repeats of a counted capture of the same profiler, rank and step (an earlier profiling session); NULL when none. Their rows stay in the per-capture views (device_time, memory_peak, role_timeline).
  left_out_captures
) as
with capture_profilers as (
  select
    run, capture,
    case
      when bool_or(kind = 'torch_trace') then 'torch'
      when bool_or(kind like 'ascend%') then 'ascend'
      when bool_or(kind = 'nvtx_jsonl') then 'nvtx'
      else 'other'
    end as profiler,
  from sources
  where capture is not null
  group by run, capture
),

typed_spans as (
  select
    t.run, t.role, t.rank_id, t.clock, t.dur_ns,
    case when t.source = 'window' then 'window:' || coalesce(p.profiler, 'other') else t.source end as span_source,
  from role_timeline as t
  anti join internal.left_out_captures using (run, capture)
  left join capture_profilers as p using (run, capture)
),

step_spans as (
  select
    run, role, rank_id, 'step_times' as span_source, null::varchar as clock,
    sum(coalesce(stage_ns, computing_ns + communication_not_overlapped_ns + free_ns))::bigint as span_ns,
  from step_times
  anti join internal.left_out_captures using (run, capture)
  group by run, role, rank_id
),

rank_spans as not materialized (
  select run, role, rank_id, span_source, clock, sum(dur_ns)::bigint as span_ns
  from typed_spans
  group by run, role, rank_id, span_source, clock
  union all
  select * from step_spans where span_ns is not null
),

spans as (
  -- The role's kind of span: the one most of its ranks have (ties: nvtx, mstx, step_times,
  -- windows, then the clock), picked by windows rather than a join, so that a query's
  -- filter on run reaches the tables below.
  select run, role, rank_id, span_ns, span_source, clock
  from (
    select
      *,
      first_value(span_source) over by_preference as role_source,
      first_value(clock) over by_preference as role_clock,
    from (select *, count(*) over (partition by run, role, span_source, clock) as kind_ranks from rank_spans)
    window by_preference as (
      partition by run, role
      order by kind_ranks desc,
        case span_source when 'nvtx' then 0 when 'mstx' then 1 when 'step_times' then 2
          when 'window:ascend' then 3 when 'window:torch' then 4 when 'window:nvtx' then 5 else 6 end,
        clock
    )
  )
  where role is not null and span_source = role_source and coalesce(clock, '') = coalesce(role_clock, '')
),

snapshot_captures as (
  select distinct run, capture from sources where kind = 'torch_snapshot'
),

peaks as (
  -- The peak of live bytes; for a memory snapshot, what its allocator held at its peak (its
  -- trace alone misses the blocks allocated before recording). The highest over the rank's
  -- captures and devices.
  select
    p.run, p.role, p.rank_id,
    max(case when s.capture is not null then coalesce(p.allocator_peak_bytes, p.peak_live_bytes) else p.peak_live_bytes end)
      as peak_live_bytes,
  from memory_peak as p
  anti join internal.left_out_captures using (run, capture)
  left join snapshot_captures as s using (run, capture)
  group by p.run, p.role, p.rank_id
),

rank_rows as (
  -- Every rank with spans of any kind or a peak: its span of the role's kind, its peak.
  select run, role, rank_id, null::bigint as span_ns, null::bigint as peak_live_bytes, null::varchar as span_source,
    null::varchar as clock,
  from rank_spans
  union all
  select run, role, rank_id, span_ns, null, span_source, clock from spans
  union all
  select run, role, rank_id, null, peak_live_bytes, null, null from peaks
),

per_rank as (
  -- One group per rank, and no outer join: a query's filter on run reaches every table
  -- scan below (through a join it would reach one side only). A rank whose role or rank_id
  -- is NULL matches nothing, as a join's key would not: no span, no peak.
  select
    run, role, rank_id, span_ns, peak_live_bytes,
    any_value(span_source) over (partition by run, role) as span_source,
    any_value(clock) over (partition by run, role) as span_clock,
  from (
    select
      run, role, rank_id,
      case when role is not null and rank_id is not null then max(span_ns) end as span_ns,
      case when role is not null and rank_id is not null then max(peak_live_bytes) end as peak_live_bytes,
      max(span_source) as span_source, max(clock) as clock,
    from rank_rows
    group by run, role, rank_id
  )
),

with_medians as (
  select
    *,
    count(*) over role_ranks as role_ranks,
    quantile_disc(span_ns, 0.5) over role_ranks as median_span_ns,
    quantile_disc(peak_live_bytes, 0.5) over role_ranks as median_peak_live_bytes,
  from per_rank
  window role_ranks as (partition by run, role)
),

waited_for as materialized (
  select run, role, rank_id, bool_or(is_straggler) as is_straggler
  from stragglers
  group by run, role, rank_id
),

-- The captures each rank leaves out, from internal.rank_captures alone: a join back to
-- per_rank would be a second use of it, computed for every run whatever a query's filter.
left_out_by_role as (
  select run, role, rank_id, list(capture) as captures
  from internal.rank_captures
  where not counted and role is not null and capture is not null
  group by run, role, rank_id
),

-- A capture that names no role (an NVTX export: each range is its own role) is left out on
-- every role of its rank.
left_out_on_every_role as (
  select run, rank_id, list(capture) as captures
  from internal.rank_captures
  where not counted and role is null and capture is not null
  group by run, rank_id
),

roles_with_collectives as (
  select distinct run, role, true as has_collectives from waited_for
),

final as (
  select
    m.run, m.role, m.rank_id, m.role_ranks, m.span_ns,
    m.median_span_ns::bigint as median_span_ns,
    m.span_ns / nullif(m.median_span_ns, 0) as span_vs_median,
    case
      when c.has_collectives then coalesce(w.is_straggler, false)
      else coalesce(m.span_ns / nullif(m.median_span_ns, 0) > 1.1, false)
    end as is_straggler,
    case when c.has_collectives then 'collectives' else 'span_vs_median' end as straggler_rule,
    m.peak_live_bytes,
    m.median_peak_live_bytes::bigint as median_peak_live_bytes,
    m.peak_live_bytes / nullif(m.median_peak_live_bytes, 0) as peak_vs_median,
    coalesce(abs(m.peak_live_bytes / nullif(m.median_peak_live_bytes, 0) - 1) > 0.1, false) as is_memory_outlier,
    m.span_source,
    m.span_clock,
    case when m.role is not null
      then nullif(array_to_string(list_sort(coalesce(o.captures, []) || coalesce(a.captures, [])), ', '), '')
    end as left_out_captures,
  from with_medians as m
  left join roles_with_collectives as c on m.run = c.run and m.role = c.role
  left join waited_for as w on m.run = w.run and m.role = w.role and m.rank_id = w.rank_id
  left join left_out_by_role as o on m.run = o.run and m.role = o.role and m.rank_id = o.rank_id
  left join left_out_on_every_role as a on m.run = a.run and m.rank_id = a.rank_id
)

select * from final
