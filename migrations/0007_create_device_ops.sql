-- Device activity (issue 22): every kernel, collective, memcpy and memset a device ran,
-- from Ascend text exports (trace_view.json's Ascend Hardware and HCCL rows), Ascend db
-- exports (TASK with COMPUTE_TASK_INFO, COMMUNICATION_OP) and Kineto traces (kernel,
-- gpu_memcpy, gpu_memset, MTIA's device events). Keys as in 0001. "group" is quoted: it is
-- an SQL keyword, and the contract names the column so.

create table device_ops (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  step integer,
  device varchar,
  stream bigint,
  name varchar,
  kind varchar not null,
  start_ns bigint not null,
  end_ns bigint not null,
  collective varchar,
  "group" varchar,
  seq bigint,
  element_count bigint,
  data_type varchar,
  source_type varchar,
  correlation_id bigint,
  launch_op varchar,
  launch_ts_ns bigint,
  launch_tid bigint
);
comment on table device_ops is 'One row per device activity of a rank: a kernel, a collective, a memcpy or memset (Ascend trace_view.json device and HCCL rows or db TASK / COMMUNICATION_OP; Kineto kernel, gpu_memcpy, gpu_memset and MTIA device events). A collective is one row (its HCCL or NCCL tasks are not repeated).';
comment on column device_ops.run is 'Run name.';
comment on column device_ops.role is 'Role of the rank.';
comment on column device_ops.rank_id is 'Global rank.';
comment on column device_ops.capture is 'Capture (rank dir or trace file path relative to the profile dir) the activity came from.';
comment on column device_ops.source_id is 'The sources row (trace or db file) this row came from.';
comment on column device_ops.step is 'The profiler''s own step (n of the ProfilerStep#n that launched the activity, or whose span it starts in); when the capture marks none, the training step its path names; else NULL.';
comment on column device_ops.device is 'Device: NPU:<id> (db export TASK.deviceId), cuda:<n> (Kineto args.device; ROCm too), mtia:<pid> (MTIA device events); NULL from an Ascend text export, whose trace names none (ranks.device does).';
comment on column device_ops.stream is 'Stream (Ascend: the Physic Stream Id or TASK.streamId; Kineto: args.stream); NULL for an HCCL op row, which spans its streams.';
comment on column device_ops.name is 'Kernel, task or collective name as the source writes it (hcom_allReduce__586_0_1, ncclKernel_AllReduce_...).';
comment on column device_ops.kind is 'compute (a kernel; Ascend: an AI Core / AI Vector / AI CPU / MIX task), communication (a collective or point-to-point op), memcpy, memset, or other (events, waits, profiler markers).';
comment on column device_ops.start_ns is 'Start on the device, ns since the epoch.';
comment on column device_ops.end_ns is 'End on the device, ns since the epoch.';
comment on column device_ops.collective is 'For communication: allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv, send, recv, barrier (from the source''s collective name, else the op or kernel name); NULL for other kinds or a name that says none.';
comment on column device_ops."group" is 'For communication: the process group or HCCL group as the source names it (Kineto Process Group Name, db COMMUNICATION_OP.groupName, the trace''s HCCL thread such as Group 0); NULL when the source names none.';
comment on column device_ops.seq is 'For communication: the collective''s sequence number in its group where the source records one, else its 1-based order among the rank''s collectives of its group in the file.';
comment on column device_ops.element_count is 'For communication: elements moved (HCCL count, Kineto In msg nelems); NULL when the source gives none.';
comment on column device_ops.data_type is 'For communication: data type as the source spells it (FP32, Float); NULL when none.';
comment on column device_ops.source_type is 'The source''s own type of the row: Ascend Task Type (AI_CORE, PCIE_DMA_SQE, ...) or HCCL for an op row; the Kineto category (kernel, gpu_memcpy, gpu_memset, mtia_ccp_events).';
comment on column device_ops.correlation_id is 'The id linking the activity to its launch: Kineto correlation, Ascend connection id; NULL when none.';
comment on column device_ops.launch_op is 'The CPU op that launched the activity (the innermost cpu_op enclosing the launch the trace links it to); NULL when the trace links none.';
comment on column device_ops.launch_ts_ns is 'When the launch happened on the CPU (the runtime call or the async flow''s start), ns since the epoch; NULL when unlinked.';
comment on column device_ops.launch_tid is 'CPU thread of the launch; NULL when unlinked.';

-- Files loaded before this migration landed no device rows: the next ingest reads them again.
update sources set fingerprint = 'reload: device_ops added by migration 0007'
where fingerprint is not null and kind in ('ascend_trace', 'ascend_db', 'torch_trace');
