-- The base tables of the public contract (see DESIGN.md). Every fact row carries
-- run, role, rank_id and capture (the rank dir or trace file it came from, so several
-- captures of one rank stay apart), plus source_id: the sources row that loaded it, which
-- is how a changed file replaces exactly its own rows.

create sequence if not exists _source_ids start 1;

create table runs (
  run varchar primary key,
  profile_dir varchar not null,
  first_ingested_at timestamp not null,
  last_ingested_at timestamp not null
);
comment on table runs is 'One row per ingested run (a profile dir).';
comment on column runs.run is 'Run name: the profile dir''s name unless set with --run.';
comment on column runs.profile_dir is 'Absolute path of the profile dir the run was ingested from.';
comment on column runs.first_ingested_at is 'When the run was first ingested (UTC).';
comment on column runs.last_ingested_at is 'When an ingest last loaded or replaced a file of the run (UTC).';

create table sources (
  source_id bigint not null,
  run varchar not null,
  role varchar,
  rank_id integer,
  capture varchar,
  kind varchar not null,
  path varchar not null,
  bytes bigint,
  mtime timestamp,
  fingerprint varchar,
  status varchar not null,
  rows bigint not null,
  message varchar,
  seconds double,
  ingested_at timestamp not null
);
comment on table sources is 'The ingest log: one row per (run, path) of a source file seen by ingest, with what happened to it.';
comment on column sources.source_id is 'Id of the file; every fact row names it in its own source_id column.';
comment on column sources.run is 'Run the file belongs to.';
comment on column sources.role is 'Role the file was attributed to (NULL when discovery could not tell).';
comment on column sources.rank_id is 'Rank the file was attributed to (NULL when discovery could not tell, or the file holds several).';
comment on column sources.capture is 'Capture the file belongs to: the rank dir name, or the file name for single-file formats.';
comment on column sources.kind is 'Source format: ascend_memory_csv, ascend_trace, ascend_info, torch_trace, nvtx_jsonl, gmm_group_list.';
comment on column sources.path is 'Path of the file relative to the profile dir.';
comment on column sources.bytes is 'File size in bytes when it was read.';
comment on column sources.mtime is 'File modification time when it was read (UTC).';
comment on column sources.fingerprint is 'Size, mtime and a hash of the head and tail: an unchanged fingerprint makes re-ingest a skip.';
comment on column sources.status is 'ok, partial (rows salvaged from a damaged file), failed (no rows) or skipped (unchanged since the last ingest; rows are those loaded then).';
comment on column sources.rows is 'Rows the file contributed to the base tables.';
comment on column sources.message is 'What went wrong, naming the file and the row or byte offset; NULL when ok.';
comment on column sources.seconds is 'Wall seconds spent reading and loading the file.';
comment on column sources.ingested_at is 'When this row was last written (UTC).';

create table ranks (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  capture_started_ns bigint,
  device varchar,
  world_size integer,
  versions json,
  profiler_config json,
  parallel_groups json,
  metadata json
);
comment on table ranks is 'One row per capture of a rank: an Ascend rank dir, a PyTorch trace or an NVTX export.';
comment on column ranks.run is 'Run name.';
comment on column ranks.role is 'Role of the rank (rollout, actor_update, ...).';
comment on column ranks.rank_id is 'Global rank.';
comment on column ranks.capture is 'The rank dir or trace file name; several captures of one rank stay apart.';
comment on column ranks.source_id is 'The sources row this rank row came from.';
comment on column ranks.capture_started_ns is 'Start of the capture, ns since the epoch, when known (orders captures of one rank).';
comment on column ranks.device is 'Device kind and index when known, e.g. NPU:0 or cuda:3.';
comment on column ranks.world_size is 'Number of ranks in the job when the profiler recorded it.';
comment on column ranks.versions is 'Software versions the profiler recorded (torch_npu, CANN, PyTorch) as JSON.';
comment on column ranks.profiler_config is 'Profiler configuration as JSON.';
comment on column ranks.parallel_groups is 'Parallel groups (tp, pp, dp, ep ...) with their global ranks, as JSON.';
comment on column ranks.metadata is 'Other recorded metadata (environment variables, host) as JSON.';

create table memory_records (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  source_row bigint not null,
  name varchar,
  size_bytes bigint,
  alloc_ns bigint,
  release_ns bigint,
  active_release_ns bigint,
  duration_ns bigint,
  active_duration_ns bigint,
  alloc_total_allocated_bytes bigint,
  alloc_total_reserved_bytes bigint,
  alloc_total_active_bytes bigint,
  release_total_allocated_bytes bigint,
  release_total_reserved_bytes bigint,
  release_total_active_bytes bigint,
  stream_ptr varchar,
  device varchar
);
comment on table memory_records is 'One row per operator_memory.csv row of an Ascend profile, exactly as recorded.';
comment on column memory_records.run is 'Run name.';
comment on column memory_records.role is 'Role of the rank.';
comment on column memory_records.rank_id is 'Global rank.';
comment on column memory_records.capture is 'Rank dir the CSV came from.';
comment on column memory_records.source_id is 'The sources row (CSV file) this row came from.';
comment on column memory_records.source_row is '1-based data row of the CSV (the header is row 0), for provenance.';
comment on column memory_records.name is 'Operator that allocated the memory (Name).';
comment on column memory_records.size_bytes is 'Size(KB) in bytes; negative for a release row.';
comment on column memory_records.alloc_ns is 'Allocation Time(us) as ns since the epoch, exact from the decimal text.';
comment on column memory_records.release_ns is 'Release Time(us) as ns since the epoch; NULL when never released within the capture.';
comment on column memory_records.active_release_ns is 'Active Release Time(us) as ns since the epoch; NULL when empty.';
comment on column memory_records.duration_ns is 'Duration(us) in ns; NULL when empty.';
comment on column memory_records.active_duration_ns is 'Active Duration(us) in ns; NULL when empty.';
comment on column memory_records.alloc_total_allocated_bytes is 'Allocation Total Allocated(MB) in bytes: the allocator total right after the allocation.';
comment on column memory_records.alloc_total_reserved_bytes is 'Allocation Total Reserved(MB) in bytes.';
comment on column memory_records.alloc_total_active_bytes is 'Allocation Total Active(MB) in bytes.';
comment on column memory_records.release_total_allocated_bytes is 'Release Total Allocated(MB) in bytes: the allocator total right after the release; NULL when never released.';
comment on column memory_records.release_total_reserved_bytes is 'Release Total Reserved(MB) in bytes.';
comment on column memory_records.release_total_active_bytes is 'Release Total Active(MB) in bytes.';
comment on column memory_records.stream_ptr is 'Stream Ptr as written by the profiler.';
comment on column memory_records.device is 'Device Type, e.g. NPU:0.';

create table cpu_ops (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  name varchar,
  ts_ns bigint,
  dur_ns bigint,
  pid bigint,
  tid bigint,
  stack_id bigint
);
comment on table cpu_ops is 'One row per trace event with cat "cpu_op" (Ascend trace_view.json, PyTorch traces).';
comment on column cpu_ops.run is 'Run name.';
comment on column cpu_ops.role is 'Role of the rank.';
comment on column cpu_ops.rank_id is 'Global rank.';
comment on column cpu_ops.capture is 'Rank dir or trace file the event came from.';
comment on column cpu_ops.source_id is 'The sources row (trace file) this op came from.';
comment on column cpu_ops.name is 'Operator name, e.g. aten::empty_strided.';
comment on column cpu_ops.ts_ns is 'Start of the op, ns since the epoch, exact from the decimal text.';
comment on column cpu_ops.dur_ns is 'Duration of the op in ns.';
comment on column cpu_ops.pid is 'Process id from the trace (may exceed 2^31).';
comment on column cpu_ops.tid is 'Thread id from the trace.';
comment on column cpu_ops.stack_id is 'Call stack of the op (call_stacks.stack_id); NULL when the event carries no stack.';

create table call_stacks (
  stack_id bigint primary key,
  stack varchar not null,
  top_frame varchar,
  depth integer not null
);
comment on table call_stacks is 'One row per distinct call stack, shared by all runs: each stack text is stored once.';
comment on column call_stacks.stack_id is 'Deterministic id: the low 63 bits of the MD5 of the stack text.';
comment on column call_stacks.stack is 'Frames joined by a newline, in the order the profiler wrote them.';
comment on column call_stacks.top_frame is 'First frame of the stack.';
comment on column call_stacks.depth is 'Number of frames.';

create table ranges (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  source varchar not null,
  domain varchar,
  name varchar,
  start_ns bigint,
  end_ns bigint,
  pid bigint,
  tid bigint,
  thread varchar
);
comment on table ranges is 'One row per named time range; a mark is a range with end_ns = start_ns.';
comment on column ranges.run is 'Run name.';
comment on column ranges.role is 'Role: the rank''s role, or for NVTX the range''s own name.';
comment on column ranges.rank_id is 'Global rank.';
comment on column ranges.capture is 'Rank dir or trace file the range came from.';
comment on column ranges.source_id is 'The sources row this range came from.';
comment on column ranges.source is 'mstx, nvtx, torch_annotation or overlap (Ascend Overlap Analysis).';
comment on column ranges.domain is 'MSTX/NVTX domain; default when the source names none.';
comment on column ranges.name is 'Range name.';
comment on column ranges.start_ns is 'Start, ns since the epoch.';
comment on column ranges.end_ns is 'End, ns since the epoch (= start_ns for a mark).';
comment on column ranges.pid is 'Process id from the trace.';
comment on column ranges.tid is 'Thread id from the trace.';
comment on column ranges.thread is 'Thread name when the trace names it (Overlap Analysis: Computing, Communication, ...).';

create table torch_memory_events (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  event_index bigint not null,
  ts_ns bigint,
  bytes bigint,
  addr bigint,
  total_allocated_bytes bigint,
  total_reserved_bytes bigint,
  device_type integer,
  device_id integer,
  tid bigint,
  op_name varchar,
  stack_id bigint
);
comment on table torch_memory_events is 'One row per PyTorch "[memory]" instant event.';
comment on column torch_memory_events.run is 'Run name.';
comment on column torch_memory_events.role is 'Role of the rank.';
comment on column torch_memory_events.rank_id is 'Global rank.';
comment on column torch_memory_events.capture is 'Trace file the event came from.';
comment on column torch_memory_events.source_id is 'The sources row (trace file) this event came from.';
comment on column torch_memory_events.event_index is '0-based position of the event among the file''s memory events: the event order that pairs allocations with frees.';
comment on column torch_memory_events.ts_ns is 'Time of the event, ns since the epoch.';
comment on column torch_memory_events.bytes is 'Bytes allocated (> 0) or freed (< 0).';
comment on column torch_memory_events.addr is 'Address of the block.';
comment on column torch_memory_events.total_allocated_bytes is 'Allocator total allocated after the event.';
comment on column torch_memory_events.total_reserved_bytes is 'Allocator total reserved after the event.';
comment on column torch_memory_events.device_type is 'PyTorch device type code (0 = CPU, 1 = CUDA, ...).';
comment on column torch_memory_events.device_id is 'Device index (-1 for the CPU).';
comment on column torch_memory_events.tid is 'Thread that made the event.';
comment on column torch_memory_events.op_name is 'Innermost cpu_op on the same thread that encloses the event; NULL when none does.';
comment on column torch_memory_events.stack_id is 'Call stack of that op (call_stacks.stack_id); NULL when none.';

create table gmm_expert_load (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  step integer not null,
  op_index integer not null,
  expert integer not null,
  tokens bigint not null
);
comment on table gmm_expert_load is 'One row per expert of one grouped-matmul call: tokens routed to it.';
comment on column gmm_expert_load.run is 'Run name.';
comment on column gmm_expert_load.role is 'Role (the folder under step_<n>).';
comment on column gmm_expert_load.rank_id is 'Global rank (the rank<k> folder).';
comment on column gmm_expert_load.capture is 'The dump file name.';
comment on column gmm_expert_load.source_id is 'The sources row (.pt file) this row came from.';
comment on column gmm_expert_load.step is 'Training step (the step_<n> folder).';
comment on column gmm_expert_load.op_index is 'Index of the grouped-matmul call in the step (npu_grouped_matmul.<op>).';
comment on column gmm_expert_load.expert is '0-based expert index (position in the flattened group_list).';
comment on column gmm_expert_load.tokens is 'Tokens routed to the expert.';
