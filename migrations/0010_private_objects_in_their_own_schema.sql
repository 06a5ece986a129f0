-- Private objects leave the main schema (issue 19): a BI tool that lists main's tables and
-- views finds the public ones only. rlwh's own helpers live in the schema `internal`,
-- named without the leading underscore:
--   _rlwh_settings       -> internal.settings               (rows kept)
--   _source_ids          -> internal.source_ids             (continues after the last id given)
--   _memory_record_ops   -> internal.memory_record_ops      (rows kept)
--   _memory_timeline     -> internal.memory_timeline_rows   (rows kept; a name of its own,
--                           so it is never mistaken for the public view memory_timeline)
--   _torch_memory_blocks -> internal.torch_memory_blocks    (rows kept)
--   _stack_user_frames   -> internal.stack_user_frames      (rows kept)
-- The private views (_memory_records_matched, _stack_frames, _torch_memory_pairs) are
-- dropped here; they are re-created from sql/internal/ in internal after every migration.
-- _rlwh_migrations moved to internal.migrations before this ran (rlwh.warehouse.schema).
create schema if not exists internal;

drop view if exists _memory_records_matched;
drop view if exists _stack_frames;
drop view if exists _torch_memory_pairs;

create table internal.settings (
  name varchar primary key,
  value varchar not null
);
comment on table internal.settings is 'Settings that views read, written from warehouse.toml by every rlwh write (BI users read the views, which show the values they used).';
insert into internal.settings by name select * from _rlwh_settings;
drop table _rlwh_settings;

create sequence internal.source_ids start 1;
-- DuckDB takes no expression for START: step the new sequence past every id given so far.
select count(nextval('internal.source_ids')) from (
  select unnest(range(greatest(
    coalesce((select last_value from duckdb_sequences()
              where database_name = current_database() and schema_name = 'main'
                and sequence_name = '_source_ids'), 0),
    coalesce((select max(source_id) from sources), 0)))));
drop sequence _source_ids;

create table internal.memory_record_ops (
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
  stacked_stack_id bigint,
  attributed_stack_id bigint,
  stack_source varchar
);
comment on table internal.memory_record_ops is 'Derived (rlwh ingest): each memory_records row and the cpu_op it matches by ASOF; stacked_stack_id follows RL-Insight''s rule (nearest op with a stack).';
insert into internal.memory_record_ops by name select * from _memory_record_ops;
drop table _memory_record_ops;

create table internal.memory_timeline_rows (
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
  origin_row bigint,
  allocator varchar,
  allocator_live_bytes bigint,
  stack_source varchar,
  release_inferred boolean,
  clock varchar
);
comment on table internal.memory_timeline_rows is 'Derived (rlwh ingest): the rows of memory_timeline (name and stack_id only for PyTorch and snapshot rows; the view joins the Ascend ones from internal.memory_record_ops), stored so timelines and peaks answer at once. For a memory snapshot, allocator_live_bytes is what its allocator held (segments replayed backwards through the trace).';
insert into internal.memory_timeline_rows by name select * from _memory_timeline;
drop table _memory_timeline;

create table internal.torch_memory_blocks (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint,
  device varchar,
  origin_row bigint,
  name varchar,
  alloc_ns bigint,
  release_ns bigint,
  release_inferred boolean,
  size_bytes bigint,
  op_stack_id bigint,
  stack_id bigint,
  stack_source varchar,
  allocated_after_alloc_bytes bigint,
  reserved_after_alloc_bytes bigint,
  allocated_after_release_bytes bigint,
  reserved_after_release_bytes bigint
);
comment on table internal.torch_memory_blocks is 'Derived (rlwh ingest): PyTorch [memory] allocations paired with their release by (device, addr) in time order, with the stack each one justifies.';
insert into internal.torch_memory_blocks by name select * from _torch_memory_blocks;
drop table _torch_memory_blocks;

create table internal.stack_user_frames (
  stack_id bigint primary key,
  user_frame varchar,
  rule varchar not null
);
comment on table internal.stack_user_frames is 'Derived (rlwh ingest, rlwh init): the innermost non-library frame of each call_stacks row, under the library-frame rule in rule.';
insert into internal.stack_user_frames by name select * from _stack_user_frames;
drop table _stack_user_frames;
