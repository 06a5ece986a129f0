-- One row per (run, role, rank_id): how long the rank spent in the role (the sum of its
-- role_timeline spans, so several captures or ranges add up) and its peak memory, against
-- the median of the role's ranks. A rank more than 10% above the median time is a
-- straggler; more than 10% away from the median peak (either way) is a memory outlier.
-- Stragglers and outliers at a glance, without reading rank by rank.
-- depends: role_timeline, memory_peak
create or replace view rank_skew (
  -- Run name.
  run,
  -- Role.
  role,
  -- Global rank.
  rank_id,
  -- Ranks of the role in the run.
  role_ranks,
  -- Time the rank spent in the role, ns: the sum of its role_timeline spans.
  span_ns,
  -- Median span_ns over the role's ranks.
  median_span_ns,
  -- span_ns / median_span_ns.
  span_vs_median,
  -- True when span_vs_median > 1.1.
  is_straggler,
  -- Highest live bytes of the rank in the role (over its captures and devices).
  peak_live_bytes,
  -- Median peak_live_bytes over the role's ranks.
  median_peak_live_bytes,
  -- peak_live_bytes / median_peak_live_bytes.
  peak_vs_median,
  -- True when peak_vs_median is above 1.1 or below 0.9.
  is_memory_outlier
) as
with spans as (
  select run, role, rank_id, sum(dur_ns)::bigint as span_ns
  from role_timeline
  group by run, role, rank_id
),

peaks as (
  select run, role, rank_id, max(peak_live_bytes) as peak_live_bytes
  from memory_peak
  group by run, role, rank_id
),

per_rank as (
  select
    coalesce(s.run, p.run) as run,
    coalesce(s.role, p.role) as role,
    coalesce(s.rank_id, p.rank_id) as rank_id,
    s.span_ns,
    p.peak_live_bytes,
  from spans as s
  full join peaks as p using (run, role, rank_id)
),

with_medians as (
  select
    *,
    count(*) over role_ranks as role_ranks,
    median(span_ns) over role_ranks as median_span_ns,
    median(peak_live_bytes) over role_ranks as median_peak_live_bytes,
  from per_rank
  window role_ranks as (partition by run, role)
),

final as (
  select
    run, role, rank_id, role_ranks, span_ns,
    median_span_ns::bigint as median_span_ns,
    span_ns / nullif(median_span_ns, 0) as span_vs_median,
    coalesce(span_ns / nullif(median_span_ns, 0) > 1.1, false) as is_straggler,
    peak_live_bytes,
    median_peak_live_bytes::bigint as median_peak_live_bytes,
    peak_live_bytes / nullif(median_peak_live_bytes, 0) as peak_vs_median,
    coalesce(abs(peak_live_bytes / nullif(median_peak_live_bytes, 0) - 1) > 0.1, false) as is_memory_outlier,
  from with_medians
)

select * from final
