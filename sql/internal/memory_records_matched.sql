-- Every memory_records row beside the cpu_op ingest matched it to (internal.memory_record_ops):
-- the one join memory_alloc_stack and memory_event_rows share. op_* and stack_id follow
-- the nearest-op rule, stacked_stack_id RL-Insight's, attributed_stack_id and stack_source
-- memory_alloc_stack's. Private helper.
create or replace view internal.memory_records_matched as
with records as (
  select * from memory_records
),

matches as (
  select * from internal.memory_record_ops
),

final as (
  select
    r.*,
    m.op_ts_ns,
    m.op_dur_ns,
    m.op_tid,
    m.stack_id,
    m.stacked_stack_id,
    m.attributed_stack_id,
    m.stack_source,
  from records as r
  -- source_id comes from one sequence for the whole warehouse, so (source_id, source_row)
  -- names one row: two BIGINT keys keep the join's hash table small (1.5 M rows).
  left join matches as m
    on r.source_id = m.source_id
    and r.source_row = m.source_row
)

select * from final
