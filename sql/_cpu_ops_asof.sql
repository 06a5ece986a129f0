-- One row per (run, role, rank_id, capture, name, ts_ns): the cpu_ops an allocation can be
-- matched to. Several ops of one name starting in the same ns would make the ASOF match
-- arbitrary, so exactly one is kept: the one with a stack, then the longest, then the
-- lowest tid and stack_id. Private helper of memory_alloc_stack.
create or replace view _cpu_ops_asof as
with ops as (
  select run, role, rank_id, capture, name, ts_ns, dur_ns, tid, stack_id
  from cpu_ops
  where ts_ns is not null
),

final as (
  select *
  from ops
  qualify row_number() over (
    partition by run, role, rank_id, capture, name, ts_ns
    order by stack_id is null, dur_ns desc nulls last, tid nulls last, stack_id
  ) = 1
)

select * from final
