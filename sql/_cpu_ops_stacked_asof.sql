-- The ops that carry a stack, one per (run, role, rank_id, capture, name, ts_ns) like
-- _cpu_ops_asof: RL-Insight matches an allocation only to an op with a stack.
-- depends: _cpu_ops_asof
create or replace view _cpu_ops_stacked_asof as
select * from _cpu_ops_asof where stack_id is not null
