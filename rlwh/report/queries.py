"""The SQL behind every report figure, over the public views, with named parameters.

Each page shows the statements it ran and their parameters, so what a chart shows is
what a user gets by pasting them into `duckdb -readonly warehouse.duckdb`. Values are
always parameters ($run, $role, ...), never pasted into the text.

A memory timeline page first copies its rank's rows of memory_timeline into a temp
table (MEMORY_SLICE): the view recomputes the whole timeline on every query (tens of
seconds for a rank with a million allocations), and the page needs it four times.
call_stacks is the one base table read: the text of a stack_id the views carry.
"""

from __future__ import annotations

RUNS = """
select run, profile_dir, first_ingested_at, last_ingested_at
from runs
order by first_ingested_at desc, run
"""

# The runs a file of which loaded (ok or partial): a run whose every file failed is no baseline.
LOADED_RUNS = """
select run from sources where status in ('ok', 'partial') group by run
"""

SOURCE_COUNTS = """
select
  run,
  count(*) as files,
  count(*) filter (where status = 'failed') as failed,
  count(*) filter (where status = 'partial') as partial,
from sources
group by run
"""

RUN_SOURCES = """
select kind, status, role, rank_id, path, rows, message, seconds
from sources
where run = $run
order by case status when 'failed' then 0 when 'partial' then 1 else 2 end, path
"""

# The captures whose trace holds no call stack (profiled without with_stack): their ops,
# and the memory they allocated, have NULL user_frame and call_stack_top. $torch_how and
# $npu_how: how to record stacks with torch.profiler and torch_npu's profiler.
NO_STACK_CAPTURES = """
select s.role, s.rank_id, s.capture, s.kind, count(*) as ops,
  case when s.kind = 'torch_trace' then $torch_how else $npu_how end as record_stacks_with
from cpu_ops as o
join sources as s on s.source_id = o.source_id
where o.run = $run
group by s.role, s.rank_id, s.capture, s.kind, s.source_id
having count(o.stack_id) = 0
order by s.role, s.rank_id, s.capture
"""

RANK_SKEW = """
select
  role, rank_id, role_ranks, span_ns, median_span_ns, span_vs_median, is_straggler,
  peak_live_bytes, median_peak_live_bytes, peak_vs_median, is_memory_outlier,
from rank_skew
where run = $run
order by role, rank_id
"""

# Each rank's shift onto its role's reference clock: clock_offsets.applied_offset_ns, not
# 0 only where the role's clocks are aligned (the rule is in sql/clock_offsets.sql). The
# timeline subtracts it from every epoch time of the rank, as collectives does.
_CLOCK_SHIFTS = """shifts as (
  select role, rank_id, applied_offset_ns from clock_offsets where run = $run and applied_offset_ns <> 0
),
"""

# Each clock is drawn on its own axis: an NVTX export's session clock is not the epoch.
ROLE_TIMELINE = """
with """ + _CLOCK_SHIFTS + """spans as (
  select t.clock, t.role, t.rank_id, t.capture, t.source, t.name, t.dur_ns,
    coalesce(s.applied_offset_ns, 0) as shift_ns,
    t.start_ns - coalesce(s.applied_offset_ns, 0) as start_ns, t.end_ns - coalesce(s.applied_offset_ns, 0) as end_ns,
  from role_timeline as t
  left join shifts as s on t.clock = 'epoch' and s.role = t.role and s.rank_id = t.rank_id
  where t.run = $run
)
select *, count(*) over (partition by clock) as total_spans
from spans
qualify row_number() over (partition by clock order by dur_ns desc, start_ns) <= $max_spans
order by clock, role, rank_id, start_ns
"""

# The first steps of both device queries below: each rank's device ops (shifted onto its
# role's reference clock where aligned) on the compute, communication and busy lanes,
# numbered by the union island (overlapping ops on several streams are one island) each
# belongs to.
_DEVICE_OPS_NUMBERED = _CLOCK_SHIFTS + """ops as (
  select d.role, d.rank_id, d.capture, d.kind,
    d.start_ns - coalesce(s.applied_offset_ns, 0) as start_ns, d.end_ns - coalesce(s.applied_offset_ns, 0) as end_ns,
  from device_ops as d
  left join shifts as s on s.role = d.role and s.rank_id = d.rank_id
  where d.run = $run and d.kind <> 'other' and d.end_ns > d.start_ns
),
lanes as (
  select role, rank_id, capture, kind as lane, start_ns, end_ns from ops where kind in ('compute', 'communication')
  union all
  select role, rank_id, capture, 'busy' as lane, start_ns, end_ns from ops
),
marked as (
  select *, coalesce(start_ns > max(end_ns) over (
      partition by role, rank_id, capture, lane order by start_ns, end_ns
      rows between unbounded preceding and 1 preceding), true) as new_island
  from lanes
),
numbered as (
  select *, sum(new_island::integer) over (
      partition by role, rank_id, capture, lane order by start_ns, end_ns rows unbounded preceding) as island
  from marked
),
"""

# Each rank's device lanes under its role spans: union islands of compute and of
# communication (kernels overlapping on several streams are one bar), and idle, the gaps
# between islands of any device work; the longest $max_spans bars are kept.
DEVICE_LANES = """
with """ + _DEVICE_OPS_NUMBERED + """islands as (
  select role, rank_id, capture, lane, min(start_ns) as start_ns, max(end_ns) as end_ns, count(*) as ops
  from numbered
  group by role, rank_id, capture, lane, island
),
idle as (
  select role, rank_id, capture, 'idle' as lane, end_ns as start_ns,
    lead(start_ns) over (partition by role, rank_id, capture order by start_ns) as end_ns, 0 as ops
  from islands
  where lane = 'busy'
),
drawn as (
  select * from islands where lane <> 'busy'
  union all
  select * from idle where end_ns > start_ns
)
select *, end_ns - start_ns as dur_ns, count(*) over () as total_bars
from drawn
qualify row_number() over (order by end_ns - start_ns desc, start_ns) <= $max_spans
order by role, rank_id, lane, start_ns
"""

# Where a run has more device bars than a page can draw: each rank's busy time per lane
# in $bins equal bins of its role's device time range. compute and communication are the
# union islands above (their bins add up to the union, as device_time counts it), busy
# their union with every other device op; a bin's idle is its part of the rank's range
# (first device start to last end) that no op covers.
DEVICE_BINS = """
with """ + _DEVICE_OPS_NUMBERED + """islands as (
  select role, rank_id, lane, min(start_ns) as start_ns, max(end_ns) as end_ns
  from numbered
  group by role, rank_id, capture, lane, island
),
axis as (
  select role, min(start_ns) as t0, greatest(1, (max(end_ns) - min(start_ns) + $bins - 1) // $bins) as width
  from islands
  group by role
),
pieces as (
  select i.role, i.rank_id, i.lane, a.t0, a.width, b.bin,
    least(i.end_ns, a.t0 + (b.bin + 1) * a.width) - greatest(i.start_ns, a.t0 + b.bin * a.width) as covered_ns
  from islands as i
  join axis as a using (role),
    lateral (select unnest(range((i.start_ns - a.t0) // a.width, (i.end_ns - 1 - a.t0) // a.width + 1)) as bin) as b
),
binned as (
  select role, rank_id, lane, bin, any_value(t0) + bin * any_value(width) as start_ns, any_value(width) as width_ns,
    sum(covered_ns)::bigint as busy_ns
  from pieces
  group by role, rank_id, lane, bin
),
ranges as (
  select role, rank_id, min(start_ns) as first_ns, max(end_ns) as last_ns from islands group by role, rank_id
),
every_bin as (
  select r.role, r.rank_id, r.first_ns, r.last_ns, g.bin, a.t0 + g.bin * a.width as start_ns, a.width as width_ns
  from ranges as r
  join axis as a using (role),
    lateral (select unnest(range((r.first_ns - a.t0) // a.width, (r.last_ns - 1 - a.t0) // a.width + 1)) as bin) as g
),
idle as (
  select e.role, e.rank_id, 'idle' as lane, e.bin, e.start_ns, e.width_ns,
    (least(e.last_ns, e.start_ns + e.width_ns) - greatest(e.first_ns, e.start_ns)
      - coalesce(b.busy_ns, 0))::bigint as busy_ns
  from every_bin as e
  left join binned as b on b.role = e.role and b.rank_id = e.rank_id and b.lane = 'busy' and b.bin = e.bin
)
select role, rank_id, lane, bin, start_ns, width_ns, busy_ns
from (select * from binned where lane <> 'busy' union all select * from idle where busy_ns > 0)
order by role, rank_id, lane, bin
"""

# Each phase range the device worked for (phase_device_time), its CPU range on the rank's
# aligned clock, one row per device it used; the $max_phases longest ranges.
PHASE_RANGES = """
with """ + _CLOCK_SHIFTS + """phases as (
  select p.role, p.rank_id, p.capture, p.phase, p.source, p.domain, p.step, p.device, p.activities,
    p.start_ns - coalesce(s.applied_offset_ns, 0) as start_ns, p.end_ns - coalesce(s.applied_offset_ns, 0) as end_ns,
    p.end_ns - p.start_ns as dur_ns, coalesce(s.applied_offset_ns, 0) as shift_ns,
    p.window_ns, p.compute_ns, p.communication_ns, p.exposed_communication_ns, p.memcpy_ns, p.idle_ns,
    dense_rank() over (order by p.end_ns - p.start_ns desc, p.start_ns, p.rank_id, p.role, p.phase, p.capture)
      as longest,
  from phase_device_time as p
  left join shifts as s on s.role = p.role and s.rank_id = p.rank_id
  where p.run = $run
)
select * exclude (longest), max(longest) over () as total_ranges
from phases
qualify longest <= $max_phases
order by role, rank_id, start_ns, end_ns desc, device
"""

# What the device did for each phase on each rank: phase_device_time summed over the
# phase's ranges on the rank (and the devices they used), phases in the order they began
# (of two that began together, the one with the longer range, the enclosing one, first).
PHASE_TIME = """
select role, phase, rank_id, count(*) as ranges, sum(activities)::bigint as activities,
  sum(window_ns)::bigint as window_ns, sum(compute_ns)::bigint as compute_ns,
  sum(communication_ns)::bigint as communication_ns,
  sum(exposed_communication_ns)::bigint as exposed_communication_ns, sum(memcpy_ns)::bigint as memcpy_ns,
  sum(idle_ns)::bigint as idle_ns,
  min(min(start_ns)) over (partition by role, phase) as phase_start_ns,
  max(max(end_ns - start_ns)) over (partition by role, phase) as longest_range_ns,
from phase_device_time
where run = $run
group by role, phase, rank_id
order by role, phase_start_ns, longest_range_ns desc, phase, rank_id
"""

# Each rank's device time (device_time) beside why it idled (device_idle), summed over
# its steps, captures and devices.
DEVICE_BY_RANK = """
with device as (
  select role, rank_id, count(distinct step) as steps, sum(window_ns)::bigint as window_ns,
    sum(window_ns - idle_ns)::bigint as busy_ns, sum(compute_ns)::bigint as compute_ns,
    sum(communication_ns)::bigint as communication_ns,
    sum(exposed_communication_ns)::bigint as exposed_communication_ns, sum(memcpy_ns)::bigint as memcpy_ns,
    sum(idle_ns)::bigint as idle_ns, string_agg(distinct method, ', ' order by method) as methods,
  from device_time
  where run = $run
  group by role, rank_id
),
idle as (
  select role, rank_id, sum(gaps)::bigint as gaps, sum(idle_ns)::bigint as gap_ns,
    sum(host_wait_ns)::bigint as host_wait_ns, sum(kernel_wait_ns)::bigint as kernel_wait_ns,
    sum(other_wait_ns)::bigint as other_wait_ns, sum(unlinked_ns)::bigint as unlinked_ns,
  from device_idle
  where run = $run
  group by role, rank_id
)
select *
from device
full join idle using (role, rank_id)
order by role, rank_id
"""

# The collectives page: every rank's arrival at every collective instance of a role, and
# how late it was (arrival minus the first arrival) and how long it waited (last minus its own).
COLLECTIVE_ARRIVALS = """
with arrivals as (
  select role, step, name, "group", seq, seq_is_global, rank_id, arrive_ns, wait_ns, is_last, wait_capped,
    clock_offset_ns, mismatched,
    min(arrive_ns) over (partition by role, step, "group", name, seq, seq_is_global) as first_arrive_ns,
  from collectives
  where run = $run
)
select *, arrive_ns - first_arrive_ns as late_ns
from arrivals
qualify dense_rank() over (order by first_arrive_ns, role, step, "group", name, seq, seq_is_global) <= $max_instances
order by role, first_arrive_ns, step, "group", name, seq, seq_is_global, rank_id
"""

# Each rank's clock against its role's reference rank, from the collectives' end times.
CLOCK_OFFSETS = """
select role, rank_id, reference_rank, instances, offset_ns, end_spread_ns, impossible_instances,
  impossible_after_shift, aligned, applied_offset_ns
from clock_offsets
where run = $run
order by role, rank_id
"""

# The collectives page: each step's slowest links between ranks (the communication matrix's
# totals, slowest_links), the first few of every step.
SLOWEST_LINKS = """
select role, step, slowness_rank, links, rank_id, dst_rank_id, src_rank, dst_rank, collective, "group",
  transport_type, size_bytes, duration_ns, bandwidth_gbps, transport_median_gbps, of_transport_median
from slowest_links
where run = $run and slowness_rank <= $max_links
order by role, step, slowness_rank
"""

# The collectives page and the summary: per role, the collective instances that moved their
# bytes slowest (collective_bandwidth): bytes (element count x type size), the longest stay
# of a rank in it, the slowest rank's rate over its whole stay (algbw) and the lowest rate
# after the last rank arrived (transfer: what the links did), slowest transfer first.
SLOWEST_COLLECTIVES = """
select role, step, name, "group", seq, count(*) as ranks, max(bytes) as bytes,
  max(duration_ns) as longest_stay_ns, min(algbw_gbps) as slowest_algbw_gbps,
  min(transfer_gbps) as transfer_gbps, bool_or(mismatched) as mismatched
from collective_bandwidth
where run = $run and bytes is not null
group by role, step, name, "group", seq
qualify row_number() over (
  partition by role order by min(transfer_gbps) nulls last, min(algbw_gbps), step, name, seq
) <= $max_rows
order by role, transfer_gbps nulls last, slowest_algbw_gbps, step, name, seq
"""

STRAGGLERS = """
select role, step, rank_id, waited_for_ns, late_ns, last_at, collectives, left_out, ranks, is_straggler
from stragglers
where run = $run
order by role, step
"""

MEMORY_SLICE = """
create or replace temp table _rlwh_memory_slice as
select
  capture, device, source, ts_ns, event, delta_bytes, live_bytes,
  allocator, allocator_live_bytes, allocator_allocated_bytes, allocator_reserved_bytes,
  name, size_bytes, stack_id, call_stack_top, user_frame, stack_source, origin_row, clock,
  -- the timeline's own event order (sql/internal/memory_rules.sql): time, releases first, position
  row_number() over (
    partition by capture, device, clock order by internal.memory_event_order(ts_ns, event, origin_row), source
  ) - 1 as seq,
from memory_timeline
where run = $run and role = $role and rank_id = $rank_id
"""

# One panel per (capture, device, clock): a memory snapshot whose trace records no time is
# on the 'sequence' clock (positions), never drawn on a time axis. last_alloc_ns ends the
# allocations: a block released long after them (at the end of the capture) would
# otherwise stretch the x axis.
MEMORY_PANELS = """
with ends as (
  select capture, device, clock, max(ts_ns) filter (where event = 'alloc') as last_alloc_ns
  from _rlwh_memory_slice
  group by capture, device, clock
)
select
  capture, device, clock, count(*) as events, min(ts_ns) as first_ns, max(ts_ns) as last_ns, last_alloc_ns,
  count(*) filter (where event = 'release' and ts_ns > last_alloc_ns) as tail_releases,
  list(distinct allocator order by allocator) filter (where allocator is not null) as allocators,
from _rlwh_memory_slice
join ends using (capture, device, clock)
group by capture, device, clock, last_alloc_ns
order by capture, device, clock
"""

# Min and max of each line per time bucket: the peak is the max of its bucket, so it is
# always kept (uniform sampling drops it). Below $max_points events nothing is reduced.
# The 'live' series is every block of the device; each allocator's series (its own live
# bytes and the totals it reported) keeps its own rows only, since an Ascend device has
# two allocators (PTA and GE) whose totals never compare with each other's blocks.
MEMORY_LINES = """
with events as (
  select * from _rlwh_memory_slice where capture = $capture and device = $device and clock = $clock
),
bounds as (
  select min(ts_ns) as t0, max(ts_ns) - min(ts_ns) + 1 as width, count(*) as n, min(seq) as first_seq,
         max(seq) as last_seq
  from events
),
bucketed as (
  select e.*,
    case when b.n <= $max_points then e.seq
         else ((e.ts_ns - b.t0)::hugeint * $buckets // b.width)::bigint end as bucket,
  from events as e, bounds as b
),
live_picked as (
  select arg_min(seq, live_bytes) as lo, arg_max(seq, live_bytes) as hi
  from bucketed
  group by bucket
),
allocator_picked as (
  select allocator, [
    arg_min(seq, allocator_live_bytes), arg_max(seq, allocator_live_bytes),
    arg_min(seq, allocator_allocated_bytes), arg_max(seq, allocator_allocated_bytes),
    arg_min(seq, allocator_reserved_bytes), arg_max(seq, allocator_reserved_bytes),
    min(seq), max(seq)
  ] as seqs,
  from bucketed
  where allocator is not null
  group by bucket, allocator
),
kept as (
  select 'live' as series, unnest([lo, hi]) as seq from live_picked
  union all select 'live', first_seq from bounds
  union all select 'live', last_seq from bounds
  union all select 'allocator', unnest(seqs) from allocator_picked
)
select distinct
  k.series, e.seq, e.ts_ns, e.event, e.live_bytes, e.allocator, e.allocator_live_bytes,
  e.allocator_allocated_bytes, e.allocator_reserved_bytes, e.name, e.size_bytes, e.stack_id, e.call_stack_top,
from kept as k
join events as e using (seq)
where k.seq is not null
order by k.series, if(k.series = 'allocator', e.allocator, null), e.seq
"""

# The largest allocation of each time bucket (every allocation below $max_bars).
MEMORY_BARS = """
with allocations as (
  select * from _rlwh_memory_slice
  where capture = $capture and device = $device and clock = $clock and event = 'alloc'
),
bounds as (
  select min(ts_ns) as t0, max(ts_ns) - min(ts_ns) + 1 as width, count(*) as n from allocations
),
picked as (
  select arg_max(a.seq, a.size_bytes) as seq
  from allocations as a, bounds as b
  group by case when b.n <= $max_bars then a.seq
                else ((a.ts_ns - b.t0)::hugeint * $buckets // b.width)::bigint end
)
select a.seq, a.ts_ns, a.name, a.allocator, a.size_bytes, a.stack_id, a.call_stack_top, a.user_frame,
  b.n as allocations
from picked as p
join allocations as a using (seq), bounds as b
order by a.seq
"""

# Blocks as intervals of the timeline's own events, mapped onto the kept points of the
# live line: a block is live after event s when alloc_seq <= s < release_seq, so the
# blocks live at a point add up to its live_bytes exactly.
_BLOCK_SPANS = """
with events as (
  select * from _rlwh_memory_slice where capture = $capture and device = $device and clock = $clock
),
numbered as (
  select seq, row_number() over (order by seq) - 1 as point
  from (select unnest($point_seqs::bigint[]) as seq)
),
points as (
  select seq, point, row_number() over (order by seq) - 1 as k
  from numbered
  where point % $stride = 0 or point = $keep_point
),
blocks as (
  select a.seq as alloc_seq, r.seq as release_seq, a.size_bytes,
  from events as a
  left join events as r on r.event = 'release' and r.source = a.source and r.origin_row = a.origin_row
  where a.event = 'alloc'
),
spans as (
  select b.alloc_seq, b.size_bytes, p1.k as first_k, coalesce(p2.k, (select count(*) from points)) as end_k,
  from blocks as b
  asof join points as p1 on b.alloc_seq <= p1.seq
  asof left join points as p2 on b.release_seq <= p2.seq
)
"""

MEMORY_HOVER_COST = _BLOCK_SPANS + """
select coalesce(sum(greatest(end_k - first_k, 0)), 0)::bigint as block_points from spans
"""

# The 10 largest blocks live at each kept point (of every $stride-th point when the
# full answer would be too large; the chosen $keep_point, the peak, is always there).
MEMORY_HOVER = _BLOCK_SPANS + """,
live as (
  select unnest(range(first_k, end_k)) as k, alloc_seq, size_bytes
  from spans
  where first_k < end_k
)
select p.point, max_by(l.alloc_seq, l.size_bytes, 10) as top_alloc_seqs
from live as l
join points as p using (k)
group by p.point
order by p.point
"""

MEMORY_BLOCKS_BY_SEQ = """
select seq, ts_ns, name, size_bytes, stack_id, call_stack_top, user_frame, stack_source, allocator
from _rlwh_memory_slice
where capture = $capture and device = $device and clock = $clock and seq in (select unnest($seqs::bigint[]))
"""

# The allocator's totals as memory_record.csv / MEMORY_RECORD has them (issue 12), for
# the component asked for, reduced like the lines. memory_usage is a public base table:
# no view adds anything to these rows.
# Tables or views: in a dataset's thin file every table is a view over Parquet.
HAS_MEMORY_USAGE = """
select count(*) > 0 as present from information_schema.tables
where table_name = 'memory_usage' and table_schema = 'main'
"""

HAS_NPU_MODULE_MEMORY = """
select count(*) > 0 as present from information_schema.tables
where table_name = 'npu_module_memory' and table_schema = 'main'
"""

MEMORY_USAGE_COMPONENTS = """
select component, count(*) as samples
from memory_usage
where run = $run and role = $role and rank_id = $rank_id and capture = $capture and device = $device
  and total_allocated_bytes is not null
group by component
order by component
"""

MEMORY_USAGE = """
with usage as (
  select ts_ns, total_allocated_bytes, total_reserved_bytes, source_row,
         row_number() over (order by ts_ns, source_row) as k,
  from memory_usage
  where run = $run and role = $role and rank_id = $rank_id and capture = $capture and device = $device
    and component = $component and ts_ns is not null
),
bounds as (
  select min(ts_ns) as t0, max(ts_ns) - min(ts_ns) + 1 as width, count(*) as n from usage
),
picked as (
  select [arg_min(k, total_allocated_bytes), arg_max(k, total_allocated_bytes),
          arg_min(k, total_reserved_bytes), arg_max(k, total_reserved_bytes), min(k), max(k)] as ks,
  from usage as u, bounds as b
  group by case when b.n <= $max_points then u.k
                else ((u.ts_ns - b.t0)::hugeint * $buckets // b.width)::bigint end
)
select distinct u.ts_ns, u.total_allocated_bytes, u.total_reserved_bytes, u.k
from (select unnest(ks) as k from picked) as p
join usage as u using (k)
order by u.k
"""

# The device memory each CANN module reserved (npu_module_mem.csv / NPU_MODULE_MEM), for
# the $max_modules modules that reserved the most, reduced like the lines. A public base
# table no view adds to.
NPU_MODULE_MEMORY = """
with modules as (
  select module, ts_ns, total_reserved_bytes, source_row,
  from npu_module_memory
  where run = $run and role = $role and rank_id = $rank_id and capture = $capture and device = $device
    and ts_ns is not null and total_reserved_bytes is not null
),
top as (
  select module from modules group by module order by max(total_reserved_bytes) desc, module limit $max_modules
),
numbered as (
  select m.*, row_number() over (partition by m.module order by m.ts_ns, m.source_row) as k,
  from modules as m
  semi join top using (module)
),
bounds as (
  select min(ts_ns) as t0, max(ts_ns) - min(ts_ns) + 1 as width, count(*) as n from numbered
),
picked as (
  select n.module, [arg_min(n.k, n.total_reserved_bytes), arg_max(n.k, n.total_reserved_bytes),
                    min(n.k), max(n.k)] as ks,
  from numbered as n, bounds as b
  group by n.module, case when b.n <= $max_points then n.k
                          else ((n.ts_ns - b.t0)::hugeint * $buckets // b.width)::bigint end
)
select distinct n.module, n.ts_ns, n.total_reserved_bytes, n.k
from (select module, unnest(ks) as k from picked) as p
join numbered as n using (module, k)
order by n.module, n.k
"""

CALL_STACKS = """
select stack_id, stack
from call_stacks
where stack_id in (select unnest($stack_ids::bigint[]))
"""

GMM_LAYER_LOAD = """
select step, role, rank_id, layer, expert, tokens
from gmm_layer_load
where run = $run and phase = 'forward' and op_in_layer = 1 and layer is not null
order by step, role, rank_id, layer, expert
"""

GMM_IMBALANCE = """
with layers as (
  select distinct run, step, role, rank_id, op_index, layer
  from gmm_layer_load
  where run = $run and phase = 'forward' and op_in_layer = 1 and layer is not null
)
select l.step, l.role, l.rank_id, l.layer, i.experts, i.total_tokens, i.max_tokens, i.max_mean_ratio, i.cv,
       i.hottest_expert,
from gmm_imbalance as i
join layers as l using (run, step, role, rank_id, op_index)
order by l.step, l.role, l.rank_id, l.layer
"""

REGRESSION_METRICS = """
select role, rank_id, peak_live_bytes::bigint as peak_live_bytes, span_ns
from rank_skew
where run = $run
"""
