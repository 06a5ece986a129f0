-- One row per step the profiler itself marked in a capture: PyTorch's ProfilerStep#<n>
-- record_function ranges (Kineto traces) and torch_npu's ProfilerStep#<n> cpu_ops (Ascend
-- trace_view.json). profiler_step is the profiler's own counter <n> (the number
-- step_trace_time.csv's Step column and step_times.step carry); step is the training step
-- the capture's folders name, when they do. The two differ: a profiler schedule counts its
-- own iterations. Join other tables by time (start_ns <= ts_ns < end_ns) to compare steps.
create or replace view profiler_steps (
  -- Run name.
  run,
  -- Role of the rank.
  role,
  -- Global rank.
  rank_id,
  -- Capture (path relative to the profile dir) the step was recorded in.
  capture,
  -- Training step the capture's path names; NULL when none.
  step,
  -- The profiler's step number n of ProfilerStep#n.
  profiler_step,
  -- Start of the step, ns since the epoch.
  start_ns,
  -- End of the step, ns since the epoch.
  end_ns,
  -- end_ns - start_ns.
  dur_ns,
  -- Where the mark came from: 'torch_annotation' (a Kineto range) or 'cpu_op' (torch_npu).
  source
) as
with torch_steps as (
  select
    run, role, rank_id, capture, step, name, start_ns, end_ns, 'torch_annotation' as source,
  from ranges
  where source = 'torch_annotation' and domain = 'default' and starts_with(name, 'ProfilerStep#')
),

ascend_steps as (
  select
    run, role, rank_id, capture, step, name, ts_ns as start_ns, ts_ns + coalesce(dur_ns, 0) as end_ns,
    'cpu_op' as source,
  from cpu_ops
  where starts_with(name, 'ProfilerStep#')
),

marked as (
  select * from torch_steps
  union all
  select * from ascend_steps
),

final as (
  select
    run, role, rank_id, capture, step,
    try_cast(substr(name, length('ProfilerStep#') + 1) as bigint) as profiler_step,
    start_ns, end_ns, end_ns - start_ns as dur_ns, source,
  from marked
  where regexp_full_match(name, 'ProfilerStep#[0-9]+')
)

select * from final
