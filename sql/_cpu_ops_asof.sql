-- One row per (run, role, rank_id, capture, name, ts_ns): the cpu_ops an allocation can be
-- matched to. Several ops of one name starting in the same ns would make the ASOF match
-- arbitrary, so exactly one is kept: the one with a stack, then the longest, then the
-- lowest tid, then the lowest stack_id. A hash aggregate (max_by over that ranking)
-- rather than a window: ~6x faster on millions of ops. Private helper of memory_alloc_stack.
create or replace view _cpu_ops_asof as
with ops as (
  select run, role, rank_id, capture, name, ts_ns, dur_ns, tid, stack_id
  from cpu_ops
  where ts_ns is not null
),

ranked as (
  select
    run, role, rank_id, capture, name, ts_ns,
    max_by(
      struct_pack(dur_ns, tid, stack_id),
      -- Lists compare element by element: stack first, longest, lowest tid, lowest stack_id.
      [(stack_id is not null)::bigint, coalesce(dur_ns, -1), -coalesce(tid, 9223372036854775807),
       -coalesce(stack_id, 0)]
    ) as op,
  from ops
  group by run, role, rank_id, capture, name, ts_ns
),

final as (
  select run, role, rank_id, capture, name, ts_ns, op.dur_ns, op.tid, op.stack_id
  from ranked
)

select * from final
