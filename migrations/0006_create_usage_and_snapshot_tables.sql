-- Memory and step facts beyond operator_memory.csv (issue 12): the allocator's totals over
-- time (memory_record.csv / MEMORY_RECORD), the CANN modules' reserved memory
-- (npu_module_mem.csv / NPU_MODULE_MEM), per-step stage times (step_trace_time.csv /
-- STEP_TIME + analysis.db StepTraceTime), and PyTorch memory snapshots (segments, blocks
-- and the device_traces' allocations paired with their frees). Keys as in 0001.

create table memory_usage (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  source_row bigint not null,
  component varchar,
  ts_ns bigint,
  total_allocated_bytes bigint,
  total_reserved_bytes bigint,
  total_active_bytes bigint,
  stream_ptr varchar,
  device varchar
);
comment on table memory_usage is 'One row per memory_record.csv / MEMORY_RECORD row of an Ascend profile: the allocator''s totals at one moment, by component.';
comment on column memory_usage.run is 'Run name.';
comment on column memory_usage.role is 'Role of the rank.';
comment on column memory_usage.rank_id is 'Global rank.';
comment on column memory_usage.capture is 'Rank dir the file came from.';
comment on column memory_usage.source_id is 'The sources row (CSV or db file) this row came from.';
comment on column memory_usage.source_row is '1-based data row of the CSV (header is row 0), or 1-based row of MEMORY_RECORD in table order.';
comment on column memory_usage.component is 'APP (the whole process, as the driver sees it), PTA (the PyTorch caching allocator), GE (graph engine) or PTA+GE.';
comment on column memory_usage.ts_ns is 'Timestamp(us) as ns since the epoch, exact from the decimal text.';
comment on column memory_usage.total_allocated_bytes is 'Total Allocated(MB) in bytes: memory held by live tensors; NULL when the source leaves it empty (APP rows).';
comment on column memory_usage.total_reserved_bytes is 'Total Reserved(MB) in bytes: memory the allocator holds from the device (allocated plus its cache).';
comment on column memory_usage.total_active_bytes is 'Total Active(MB) in bytes: allocated plus freed blocks still in use by a stream; NULL when empty.';
comment on column memory_usage.stream_ptr is 'Stream Ptr as written by the profiler; NULL when empty.';
comment on column memory_usage.device is 'Device, e.g. NPU:0.';

create table npu_module_memory (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  source_row bigint not null,
  module varchar,
  ts_ns bigint,
  total_reserved_bytes bigint,
  device varchar
);
comment on table npu_module_memory is 'One row per npu_module_mem.csv / NPU_MODULE_MEM row: device memory reserved by one CANN module at one moment.';
comment on column npu_module_memory.run is 'Run name.';
comment on column npu_module_memory.role is 'Role of the rank.';
comment on column npu_module_memory.rank_id is 'Global rank.';
comment on column npu_module_memory.capture is 'Rank dir the file came from.';
comment on column npu_module_memory.source_id is 'The sources row (CSV or db file) this row came from.';
comment on column npu_module_memory.source_row is '1-based data row of the CSV (header is row 0), or 1-based row of NPU_MODULE_MEM in table order.';
comment on column npu_module_memory.module is 'CANN module (Component in the CSV; ENUM_MODULE name in the db), e.g. GE, HCCL, RUNTIME.';
comment on column npu_module_memory.ts_ns is 'Timestamp(us) as ns since the epoch, exact from the decimal text.';
comment on column npu_module_memory.total_reserved_bytes is 'Total Reserved(MB) in bytes: device memory the module holds.';
comment on column npu_module_memory.device is 'Device, e.g. NPU:0.';

create table step_times (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  source_row bigint not null,
  step bigint,
  start_ns bigint,
  end_ns bigint,
  computing_ns bigint,
  communication_not_overlapped_ns bigint,
  overlapped_ns bigint,
  communication_ns bigint,
  free_ns bigint,
  stage_ns bigint,
  bubble_ns bigint,
  communication_not_overlapped_exclude_receive_ns bigint,
  preparing_ns bigint
);
comment on table step_times is 'One row per step of one rank (step_trace_time.csv, or the db export''s STEP_TIME with analysis.db StepTraceTime): the time of each stage in ns.';
comment on column step_times.run is 'Run name.';
comment on column step_times.role is 'Role of the rank.';
comment on column step_times.rank_id is 'Global rank.';
comment on column step_times.capture is 'Rank dir the file came from.';
comment on column step_times.source_id is 'The sources row (CSV or db file) this row came from.';
comment on column step_times.source_row is '1-based data row of the CSV (header is row 0), or 1-based position among the db export''s steps (STEP_TIME in step order, then steps only analysis.db names).';
comment on column step_times.step is 'Step number the profiler wrote (Step; STEP_TIME.id); when it wrote none, the training step the capture''s path names; else NULL.';
comment on column step_times.start_ns is 'Start of the step, ns since the epoch (db export STEP_TIME only; NULL from the CSV).';
comment on column step_times.end_ns is 'End of the step, ns since the epoch (db export STEP_TIME only; NULL from the CSV).';
comment on column step_times.computing_ns is 'Computing(us) in ns: time the device computed.';
comment on column step_times.communication_not_overlapped_ns is 'Communication(Not Overlapped)(us) in ns: communication not hidden behind computing.';
comment on column step_times.overlapped_ns is 'Overlapped(us) in ns: communication overlapped with computing.';
comment on column step_times.communication_ns is 'Communication(us) in ns: all communication time.';
comment on column step_times.free_ns is 'Free(us) in ns: time the device neither computed nor communicated.';
comment on column step_times.stage_ns is 'Stage(us) in ns: pipeline stage time (excluding receive); NULL when the source has none.';
comment on column step_times.bubble_ns is 'Bubble(us) in ns: pipeline bubble (receive) time; NULL when the source has none.';
comment on column step_times.communication_not_overlapped_exclude_receive_ns is 'Communication(Not Overlapped and Exclude Receive)(us) in ns.';
comment on column step_times.preparing_ns is 'Preparing(us) in ns: from the step start to the first device task; NULL when the source has none.';

create table snapshot_segments (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  segment_index bigint not null,
  device varchar,
  device_index integer,
  address bigint,
  total_size_bytes bigint,
  allocated_bytes bigint,
  active_bytes bigint,
  requested_bytes bigint,
  segment_type varchar,
  stream bigint,
  is_expandable boolean,
  blocks bigint
);
comment on table snapshot_segments is 'One row per segment of a PyTorch memory snapshot (torch.cuda.memory._snapshot() / torch_npu.npu.memory._snapshot() pickle) at snapshot time.';
comment on column snapshot_segments.run is 'Run name.';
comment on column snapshot_segments.role is 'Role of the rank.';
comment on column snapshot_segments.rank_id is 'Global rank.';
comment on column snapshot_segments.capture is 'The snapshot file name.';
comment on column snapshot_segments.source_id is 'The sources row (snapshot file) this row came from.';
comment on column snapshot_segments.segment_index is '0-based position of the segment in the snapshot''s segments list.';
comment on column snapshot_segments.device is 'Device, e.g. NPU:0 (cuda:<n> unless the snapshot''s stacks show torch_npu).';
comment on column snapshot_segments.device_index is 'Device index as the snapshot writes it.';
comment on column snapshot_segments.address is 'Start address of the segment.';
comment on column snapshot_segments.total_size_bytes is 'Bytes the segment reserves from the device.';
comment on column snapshot_segments.allocated_bytes is 'Bytes of its blocks that are allocated.';
comment on column snapshot_segments.active_bytes is 'Bytes of its blocks that are active (allocated, or freed but still in use by a stream).';
comment on column snapshot_segments.requested_bytes is 'Bytes the callers asked for (before rounding); NULL in older snapshots.';
comment on column snapshot_segments.segment_type is 'small or large pool.';
comment on column snapshot_segments.stream is 'Stream the segment belongs to.';
comment on column snapshot_segments.is_expandable is 'True for an expandable segment; NULL in older snapshots.';
comment on column snapshot_segments.blocks is 'Number of blocks in the segment.';

create table snapshot_blocks (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  segment_index bigint not null,
  block_index bigint not null,
  device varchar,
  device_index integer,
  segment_address bigint,
  address bigint,
  size_bytes bigint,
  requested_bytes bigint,
  state varchar,
  stack_id bigint
);
comment on table snapshot_blocks is 'One row per block of a PyTorch memory snapshot''s segments at snapshot time.';
comment on column snapshot_blocks.run is 'Run name.';
comment on column snapshot_blocks.role is 'Role of the rank.';
comment on column snapshot_blocks.rank_id is 'Global rank.';
comment on column snapshot_blocks.capture is 'The snapshot file name.';
comment on column snapshot_blocks.source_id is 'The sources row (snapshot file) this row came from.';
comment on column snapshot_blocks.segment_index is 'The block''s segment (snapshot_segments.segment_index).';
comment on column snapshot_blocks.block_index is '0-based position of the block in its segment.';
comment on column snapshot_blocks.device is 'Device, e.g. NPU:0, as in snapshot_segments.';
comment on column snapshot_blocks.device_index is 'Device index as the snapshot writes it.';
comment on column snapshot_blocks.segment_address is 'Start address of the block''s segment.';
comment on column snapshot_blocks.address is 'Address of the block; when the snapshot gives none, the segment address plus the sizes of the blocks before it.';
comment on column snapshot_blocks.size_bytes is 'Bytes the block takes in its segment.';
comment on column snapshot_blocks.requested_bytes is 'Bytes the caller asked for; NULL when not recorded.';
comment on column snapshot_blocks.state is 'active_allocated, active_pending_free (freed, still in use by a stream) or inactive (cached, free).';
comment on column snapshot_blocks.stack_id is 'Call stack that allocated the block (call_stacks.stack_id, innermost frame first); NULL when the snapshot kept no frames.';

create table snapshot_trace_blocks (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  device varchar,
  device_index integer,
  clock varchar not null,
  alloc_seq bigint,
  release_seq bigint,
  free_requested_seq bigint,
  alloc_ns bigint,
  release_ns bigint,
  free_requested_ns bigint,
  release_action varchar,
  addr bigint not null,
  size_bytes bigint,
  stream bigint,
  stack_id bigint
);
comment on table snapshot_trace_blocks is 'One row per block seen in a PyTorch memory snapshot''s device_traces: an alloc paired with the next free_completed of the same address on the same device, in trace order.';
comment on column snapshot_trace_blocks.run is 'Run name.';
comment on column snapshot_trace_blocks.role is 'Role of the rank.';
comment on column snapshot_trace_blocks.rank_id is 'Global rank.';
comment on column snapshot_trace_blocks.capture is 'The snapshot file name.';
comment on column snapshot_trace_blocks.source_id is 'The sources row (snapshot file) this row came from.';
comment on column snapshot_trace_blocks.device is 'Device, e.g. NPU:0, as in snapshot_segments.';
comment on column snapshot_trace_blocks.device_index is 'Index of the device''s trace in device_traces.';
comment on column snapshot_trace_blocks.clock is 'epoch when the trace entries carry time_us (the *_ns columns hold epoch ns), sequence when they do not (only the *_seq positions order events; never draw or compare them with real time).';
comment on column snapshot_trace_blocks.alloc_seq is '0-based position of the alloc entry in the device''s trace; NULL for a block allocated before the trace began (only its free was recorded).';
comment on column snapshot_trace_blocks.release_seq is 'Position of the entry that ended the block: its free_completed, or an alloc at the same address (release_action); NULL when live at snapshot time.';
comment on column snapshot_trace_blocks.free_requested_seq is 'Position of the free_requested entry (the caller freed it; the stream may still use it); NULL when none.';
comment on column snapshot_trace_blocks.alloc_ns is 'Allocation time, ns since the epoch, from time_us; NULL on a sequence clock.';
comment on column snapshot_trace_blocks.release_ns is 'Release time, ns since the epoch; NULL on a sequence clock or when never released.';
comment on column snapshot_trace_blocks.free_requested_ns is 'free_requested time, ns since the epoch; NULL on a sequence clock or when none.';
comment on column snapshot_trace_blocks.release_action is 'free_completed, or alloc when a later allocation at the same live address ended the block (the free fell outside the trace); NULL when never released.';
comment on column snapshot_trace_blocks.addr is 'Address of the block.';
comment on column snapshot_trace_blocks.size_bytes is 'Size of the block in bytes.';
comment on column snapshot_trace_blocks.stream is 'Stream of the allocation.';
comment on column snapshot_trace_blocks.stack_id is 'Call stack of the alloc entry (call_stacks.stack_id, innermost frame first); NULL when it kept no frames.';

comment on column sources.kind is 'Source format: ascend_memory_csv, ascend_trace, ascend_info, ascend_memory_record_csv, ascend_npu_module_mem_csv, ascend_step_trace_csv, ascend_db, torch_trace, torch_snapshot, nvtx_jsonl, gmm_group_list, or ignored.';
