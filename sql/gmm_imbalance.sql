-- One row per grouped-matmul call: (run, step, role, rank_id, op_index). How evenly the
-- MoE router spread the call's tokens over the experts: a max_mean_ratio of 1 and a cv
-- of 0 mean a perfectly even load; the busiest expert sets the call's time, so a high
-- ratio is idle time on the other experts.
-- depends: internal.left_out_captures
create or replace view gmm_imbalance (
  -- Run name.
  run,
  -- Training step (the step_<n> folder).
  step,
  -- Role (the folder under step_<n>).
  role,
  -- Global rank.
  rank_id,
  -- Index of the grouped-matmul call in the step (npu_grouped_matmul.<op>).
  op_index,
  -- Number of experts in the call's group_list.
  experts,
  -- Tokens routed to all experts together.
  total_tokens,
  -- Tokens routed to the busiest expert.
  max_tokens,
  -- Mean tokens per expert.
  mean_tokens,
  -- max_tokens / mean_tokens: 1 is perfectly even; NULL when no token was routed.
  max_mean_ratio,
  -- Coefficient of variation: population standard deviation of tokens per expert / mean_tokens; NULL when no token was routed.
  cv,
  -- The busiest expert (the lowest index among ties).
  hottest_expert
) as

with

expert_load as (
  select
    run,
    step,
    -- msprobe's layout has no role folder (role NULL): '' here so the joins below keep its rows.
    coalesce(role, '') as role,
    rank_id,
    op_index,
    expert,
    tokens,
  from gmm_expert_load
  anti join internal.left_out_captures using (run, capture)
),

call_stats as (
  select
    run,
    step,
    role,
    rank_id,
    op_index,
    count(*)::integer as experts,
    sum(tokens)::bigint as total_tokens,
    max(tokens) as max_tokens,
    avg(tokens) as mean_tokens,
    stddev_pop(tokens) as stddev_tokens,
  from expert_load
  group by run, step, role, rank_id, op_index
),

hottest as (
  -- The busiest expert of each call; the lowest index wins a tie, so reruns agree.
  select
    run,
    step,
    role,
    rank_id,
    op_index,
    min(expert_load.expert) as hottest_expert,
  from expert_load
  inner join call_stats using (run, step, role, rank_id, op_index)
  where expert_load.tokens = call_stats.max_tokens
  group by run, step, role, rank_id, op_index
),

final as (
  select
    run,
    step,
    nullif(role, '') as role,
    rank_id,
    op_index,
    call_stats.experts,
    call_stats.total_tokens,
    call_stats.max_tokens,
    call_stats.mean_tokens,
    call_stats.max_tokens / nullif(call_stats.mean_tokens, 0) as max_mean_ratio,
    call_stats.stddev_tokens / nullif(call_stats.mean_tokens, 0) as cv,
    hottest.hottest_expert,
  from call_stats
  inner join hottest using (run, step, role, rank_id, op_index)
)

select * from final
