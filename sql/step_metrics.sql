-- depends: role_timeline, profiler_steps, internal.left_out_captures
-- One row per (run, step): what a VeRL training log printed for the step (phase seconds,
-- throughput, memory, response length) beside what the profile measured for the same step.
-- Steps match by number: the log's step:N and the training step a capture's folders name
-- (VeRL's <save_path>/<step>/, step_<n>, step<n>). They cannot match where the capture's
-- path names no step (its rows have step NULL), or across runs (ingest the log and the
-- profile under one --run). A profiler's own counter (ProfilerStep#n, step_times.step) is
-- not a training step and is never matched by number: its rows count here through the
-- capture's folder step. A run resumed from a checkpoint prints steps again in another log:
-- the figures come from the log written last (latest mtime, then the latest path), and
-- logs says how many printed the step. Profile figures are NULL where nothing was measured.
-- A rank's step and profiler times count each profiling session once: of the captures one
-- profiler made of the same rank and step, the latest (internal.rank_captures).
create or replace view step_metrics (
  -- Run name.
  run,
  -- Training step: the log's step:N, or the step a profiled capture's folders name.
  step,
  -- The log the figures come from (its path relative to the profile dir); NULL for a profiled step no log printed.
  log_capture,
  -- 1-based line of the step's first record in that log.
  log_line,
  -- How many logs of the run printed this step (over 1: a run resumed from a checkpoint).
  logs,
  -- timing_s/step: the whole step's seconds, as the trainer timed it.
  timing_step_s,
  -- timing_s/gen: rollout generation seconds.
  timing_gen_s,
  -- timing_s/old_log_prob: seconds recomputing the old policy's log probs.
  timing_old_log_prob_s,
  -- timing_s/ref: seconds of the reference policy's log probs.
  timing_ref_s,
  -- timing_s/values: seconds of the critic's value estimates.
  timing_values_s,
  -- timing_s/adv: seconds computing advantages.
  timing_adv_s,
  -- timing_s/update_critic: seconds updating the critic.
  timing_update_critic_s,
  -- timing_s/update_actor: seconds updating the actor.
  timing_update_actor_s,
  -- perf/throughput: tokens per second per GPU, as the trainer computed it.
  throughput,
  -- perf/max_memory_allocated_gb: the trainer's peak allocated device memory, GB.
  max_memory_allocated_gb,
  -- response_length/mean: mean response length in tokens.
  response_length_mean,
  -- True when a capture of the profile names this step in its path.
  is_profiled,
  -- Captures (rank dirs, trace files) whose path names this step.
  profile_captures,
  -- Distinct ranks among them.
  profile_ranks,
  -- Seconds from the earliest start to the latest end of the step's role spans (role_timeline, epoch clock): what the profiler saw of the step.
  profile_window_s,
  -- Seconds from the first start to the last end of the step's NVTX/MSTX phase ranges named like generation (a name holding 'generat' or 'rollout'), else of its role spans so named; NULL when none.
  profile_gen_s,
  -- Seconds from the first start to the last end of the step's NVTX/MSTX phase ranges named like the actor update ('update_actor' or 'actor_update'), else of its role spans so named; NULL when none.
  profile_update_actor_s,
  -- Seconds of ProfilerStep#n marks (profiler_steps) in the step's captures, summed per rank, of the rank with most.
  profiler_steps_s,
  -- step_trace_time (step_times) computing + communication not overlapped + free, summed per rank over its profiler steps, of the rank with most, in seconds.
  step_trace_s,
  -- profile_window_s / timing_step_s: near 1 when the profiler saw the whole step the log timed; NULL when either is missing.
  window_over_log
) as
with log_sources as (
  select source_id, mtime from sources where kind = 'verl_log'
),

log_steps as (
  select m.run, m.step, m.capture, min(m.line) as log_line, any_value(s.mtime) as mtime,
  from train_metrics as m
  join log_sources as s using (source_id)
  group by m.run, m.step, m.capture
),

chosen_logs as (
  select
    run, step, capture, log_line,
    count(*) over (partition by run, step) as logs,
  from log_steps
  -- The log written last wins: a resumed run's later file holds the steps as they stand.
  qualify row_number() over (partition by run, step order by mtime desc, capture desc) = 1
),

-- A metric printed twice for a step in one log (a step printed twice): its last value.
log_figures as (
  select
    c.run, c.step, c.capture as log_capture, c.log_line, c.logs,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/step') as timing_step_s,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/gen') as timing_gen_s,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/old_log_prob') as timing_old_log_prob_s,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/ref') as timing_ref_s,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/values') as timing_values_s,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/adv') as timing_adv_s,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/update_critic') as timing_update_critic_s,
    arg_max(m.value, m.line) filter (where m.metric = 'timing_s/update_actor') as timing_update_actor_s,
    arg_max(m.value, m.line) filter (where m.metric = 'perf/throughput') as throughput,
    arg_max(m.value, m.line) filter (where m.metric = 'perf/max_memory_allocated_gb') as max_memory_allocated_gb,
    arg_max(m.value, m.line) filter (where m.metric = 'response_length/mean') as response_length_mean,
  from chosen_logs as c
  join train_metrics as m on m.run = c.run and m.step = c.step and m.capture = c.capture
  group by c.run, c.step, c.capture, c.log_line, c.logs
),

-- Captures whose folders name a training step (a log is no capture of the profile).
profiled_captures as (
  select distinct run, capture, step, rank_id
  from sources
  where step is not null and kind <> 'verl_log' and status in ('ok', 'partial')
),

profiled as (
  select run, step, count(distinct capture) as profile_captures, count(distinct rank_id) as profile_ranks,
  from profiled_captures
  group by run, step
),

-- The step's role spans, and the NVTX and MSTX phase ranges inside them (update_actor in a
-- colocated worker's export): generation and the actor update are found by name, in the
-- phases where any is so named (a role named actor_rollout spans more than its generation),
-- else in the role spans.
named_spans as (
  select run, step, name, start_ns, end_ns, true as is_role_span
  from role_timeline
  where step is not null and clock = 'epoch'
  union all
  select run, step, name, start_ns, end_ns, false
  from ranges
  where source in ('nvtx', 'mstx') and step is not null and clock = 'epoch' and name is not null
),

named_by_kind as (
  select
    run, step, is_role_span,
    (max(end_ns) - min(start_ns)) / 1e9 as window_s,
    (max(end_ns) filter (where regexp_matches(lower(name), 'generat|rollout'))
      - min(start_ns) filter (where regexp_matches(lower(name), 'generat|rollout'))) / 1e9 as gen_s,
    (max(end_ns) filter (where regexp_matches(lower(name), 'update_actor|actor_update'))
      - min(start_ns) filter (where regexp_matches(lower(name), 'update_actor|actor_update'))) / 1e9
      as update_actor_s,
  from named_spans
  group by run, step, is_role_span
),

spans as (
  select
    run, step,
    any_value(window_s) filter (where is_role_span) as profile_window_s,
    coalesce(any_value(gen_s) filter (where not is_role_span), any_value(gen_s) filter (where is_role_span))
      as profile_gen_s,
    coalesce(any_value(update_actor_s) filter (where not is_role_span),
             any_value(update_actor_s) filter (where is_role_span)) as profile_update_actor_s,
  from named_by_kind
  group by run, step
),

marked_steps as (
  select run, step, max(rank_ns) / 1e9 as profiler_steps_s,
  from (
    select run, step, role, rank_id, sum(dur_ns) as rank_ns
    from profiler_steps
    anti join internal.left_out_captures using (run, capture)
    where step is not null
    group by run, step, role, rank_id
  )
  group by run, step
),

-- step_times.step is the profiler's counter; the training step is its capture's folder step.
step_traces as (
  select run, step, max(rank_ns) / 1e9 as step_trace_s,
  from (
    select c.run, c.step, t.role, t.rank_id,
      sum(coalesce(t.computing_ns, 0) + coalesce(t.communication_not_overlapped_ns, 0) + coalesce(t.free_ns, 0))
        as rank_ns,
    from step_times as t
    join profiled_captures as c on c.run = t.run and c.capture = t.capture and c.rank_id = t.rank_id
    anti join internal.left_out_captures as k on k.run = t.run and k.capture = t.capture
    group by c.run, c.step, t.role, t.rank_id
  )
  group by run, step
),

steps as (
  select run, step from log_figures
  union
  select run, step from profiled
),

final as (
  select
    s.run, s.step,
    l.log_capture, l.log_line, l.logs,
    l.timing_step_s, l.timing_gen_s, l.timing_old_log_prob_s, l.timing_ref_s, l.timing_values_s,
    l.timing_adv_s, l.timing_update_critic_s, l.timing_update_actor_s,
    l.throughput, l.max_memory_allocated_gb, l.response_length_mean,
    p.step is not null as is_profiled,
    coalesce(p.profile_captures, 0) as profile_captures,
    coalesce(p.profile_ranks, 0) as profile_ranks,
    w.profile_window_s, w.profile_gen_s, w.profile_update_actor_s,
    m.profiler_steps_s,
    t.step_trace_s,
    w.profile_window_s / nullif(l.timing_step_s, 0) as window_over_log,
  from steps as s
  left join log_figures as l using (run, step)
  left join profiled as p using (run, step)
  left join spans as w using (run, step)
  left join marked_steps as m using (run, step)
  left join step_traces as t using (run, step)
)

select * from final
