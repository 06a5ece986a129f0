-- What the memory views would otherwise recompute on every query: the ASOF match of each
-- operator_memory.csv row to its cpu_op, and the live-memory timeline (a window over every
-- alloc and release). rlwh ingest refreshes both for each (run, role, rank_id, capture)
-- whose files changed (ingest/derived/memory.sql); the public views read them.
-- after: refresh derived tables
-- Private: BI users read memory_alloc_stack, memory_event_rows and memory_timeline.
create table _memory_record_ops (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  source_row bigint not null,
  name varchar,
  op_ts_ns bigint,
  op_dur_ns bigint,
  op_tid bigint,
  stack_id bigint,
  stacked_stack_id bigint
);
-- name repeats memory_records.name so memory_timeline's view needs one join, not two.
comment on table _memory_record_ops is 'Derived (rlwh ingest): each memory_records row and the cpu_op it matches by ASOF; stacked_stack_id follows RL-Insight''s rule (nearest op with a stack).';

create table _memory_timeline (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint,
  device varchar,
  source varchar not null,
  ts_ns bigint not null,
  event varchar not null,
  delta_bytes bigint not null,
  live_bytes bigint not null,
  allocator_allocated_bytes bigint,
  allocator_reserved_bytes bigint,
  name varchar,
  size_bytes bigint not null,
  stack_id bigint,
  origin_row bigint
);
comment on table _memory_timeline is 'Derived (rlwh ingest): the rows of memory_timeline (name and stack_id only for PyTorch rows; the view joins the Ascend ones from _memory_record_ops), stored so timelines and peaks answer at once.';
