-- One row per expert of one grouped-matmul call, like gmm_expert_load, with the MoE layer
-- the call belongs to and whether it ran in the forward or the backward pass. What the
-- GMM expert heatmap draws: `where phase = 'forward' and op_in_layer = 1` gives one row
-- per (layer, expert).
--
-- The dumps say neither layer nor pass; both come from the loads, as in RL-Insight's gmm
-- heatmap. The gate, up and down projections of a layer are separate grouped matmuls that
-- share one routing, so they have identical loads (tokens by expert). Per (run, step,
-- role, rank_id), in op_index order:
-- 1. A run is a stretch of consecutive calls (no op_index missing) with identical loads.
-- 2. In a training role (name ending in _update: actor_update, critic_update), the first
--    call that makes a run longer than ops_per_layer starts the backward pass: the last
--    layer's forward calls are followed by its backward (or recomputed forward) calls,
--    which reuse its routing. That call and every later one are 'backward'; RL-Insight's
--    heatmap drops them. Other roles run forward only.
-- 3. A run is cut into blocks of ops_per_layer calls; op_in_layer is the 1-based place in
--    the block. Forward blocks are layers 0, 1, ... in order; a backward block takes the
--    layer of the forward block with the same load (NULL when none has it).
--
-- ops_per_layer is [gmm] ops_per_layer in warehouse.toml (default 3), which rlwh copies
-- into the private internal.settings table on every write. It must be at least the number n
-- of grouped matmuls per layer: with n < ops_per_layer (a fused gate_up makes 2) layers
-- still come out right, but the backward start is found up to ops_per_layer - n calls
-- late; a model with more grouped matmuls per layer needs the setting raised.
-- Known limit, shared with RL-Insight: with gradient accumulation the forward calls of
-- later micro-batches in the step are marked backward too.
-- depends: internal.left_out_captures
create or replace view gmm_layer_load (
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
  -- 'forward' or 'backward': the pass the call ran in (backward only in roles ending in _update).
  phase,
  -- 0-based MoE layer of the call, in forward order; NULL for a backward call whose load matches no forward layer.
  layer,
  -- 1-based position of the call among the consecutive calls of its layer (1 to ops_per_layer).
  op_in_layer,
  -- 0-based expert index (position in the flattened group_list).
  expert,
  -- Tokens routed to the expert by this call.
  tokens,
  -- Grouped matmuls per layer the rule assumed (gate, up and down projections).
  ops_per_layer
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

settings as (
  -- Grouped matmuls per MoE layer: gate, up and down projections share one routing.
  select coalesce(
    (select try_cast(value as integer) from internal.settings where name = 'gmm_ops_per_layer'), 3
  ) as ops_per_layer
),

calls as (
  -- One row per call, with its load: tokens in expert order.
  select
    run,
    step,
    role,
    rank_id,
    op_index,
    list(tokens order by expert) as load,
  from expert_load
  group by run, step, role, rank_id, op_index
),

run_starts as (
  -- A run starts where the load changes or an op_index is missing (its load is unknown).
  select
    *,
    coalesce(
      load <> lag(load) over call_order
      or op_index <> lag(op_index) over call_order + 1,
      true
    ) as starts_run,
  from calls
  window call_order as (partition by run, step, role, rank_id order by op_index)
),

run_numbers as (
  select
    *,
    sum(starts_run::integer) over (
      partition by run, step, role, rank_id
      order by op_index
      rows between unbounded preceding and current row
    ) as run_number,
  from run_starts
),

run_positions as (
  select
    *,
    row_number() over (
      partition by run, step, role, rank_id, run_number
      order by op_index
    ) as position_in_run,
  from run_numbers
),

backward_starts as (
  -- Training roles: the first call that makes a run of identical loads longer than a layer.
  select
    run,
    step,
    role,
    rank_id,
    min(run_positions.op_index) as backward_start,
  from run_positions
  cross join settings
  where run_positions.role like '%\_update' escape '\'
    and run_positions.position_in_run > settings.ops_per_layer
  group by run, step, role, rank_id
),

phased as (
  select
    run,
    step,
    role,
    rank_id,
    run_positions.op_index,
    run_positions.load,
    case
      when run_positions.op_index >= backward_starts.backward_start then 'backward'
      else 'forward'
    end as phase,
    ((run_positions.position_in_run - 1) % settings.ops_per_layer + 1)::integer as op_in_layer,
    settings.ops_per_layer,
  from run_positions
  cross join settings
  left join backward_starts using (run, step, role, rank_id)
),

forward_layers as (
  -- Forward blocks numbered in order: a block starts at op_in_layer 1.
  select
    run,
    step,
    role,
    rank_id,
    op_index,
    load,
    (sum((op_in_layer = 1)::integer) over (
      partition by run, step, role, rank_id
      order by op_index
      rows between unbounded preceding and current row
    ) - 1)::integer as layer,
  from phased
  where phase = 'forward'
),

layer_loads as (
  -- The layer each forward routing belongs to (the first, should two layers share one).
  select
    run,
    step,
    role,
    rank_id,
    load,
    min(layer) as layer,
  from forward_layers
  group by run, step, role, rank_id, load
),

call_layers as (
  select
    run,
    step,
    role,
    rank_id,
    phased.op_index,
    phased.phase,
    coalesce(forward_layers.layer, layer_loads.layer) as layer,
    phased.op_in_layer,
    phased.ops_per_layer,
  from phased
  left join forward_layers using (run, step, role, rank_id, op_index)
  left join layer_loads
    on phased.run = layer_loads.run
    and phased.step = layer_loads.step
    and phased.role = layer_loads.role
    and phased.rank_id = layer_loads.rank_id
    and phased.load = layer_loads.load
    and phased.phase = 'backward'
),

final as (
  select
    run,
    step,
    nullif(role, '') as role,
    rank_id,
    op_index,
    call_layers.phase,
    call_layers.layer,
    call_layers.op_in_layer,
    expert_load.expert,
    expert_load.tokens,
    call_layers.ops_per_layer,
  from expert_load
  inner join call_layers using (run, step, role, rank_id, op_index)
)

select * from final
