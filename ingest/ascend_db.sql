-- job: ascend_db
-- reader: rlwh.readers.ascend_db
-- fills: memory_records, memory_usage, npu_module_memory, step_times, cpu_ops, call_stacks, ranges, device_ops, communication_links, collective_transfers
-- ascend_pytorch_profiler_<rank>.db (torch_npu export_type=db), read-only: what the text export
-- of the capture would land, spelled the same (STRING_IDS names, cann:: for GE rows, NPU:<id>).
-- A rank dir that also holds the text export loads that one; this file is then 'ignored'.
insert into memory_records by name
select * from _staged_memory_records;

insert into memory_usage by name
select * from _staged_memory_usage;

insert into npu_module_memory by name
select * from _staged_npu_module_memory;

insert into step_times by name
select * from _staged_step_times;

insert into cpu_ops by name
select * from _staged_cpu_ops;

insert or ignore into call_stacks by name
select * from _staged_call_stacks;

insert into ranges by name
select * from _staged_ranges;

-- rlwh.readers.ascend_db_device: kernels and other tasks from TASK (a kernel has a
-- COMPUTE_TASK_INFO row), collectives from COMMUNICATION_OP (their tasks not again).
insert into device_ops by name
select
  run, role, rank_id, capture, source_id, step,
  'NPU:' || deviceId as device,
  streamId as stream,
  name,
  kind,
  startNs as start_ns,
  endNs as end_ns,
  collective,
  groupName as "group",
  -- opId numbers the rank's collectives in start order; the order within the group is the seq.
  if(kind = 'communication',
     row_number() over (partition by kind = 'communication', groupName order by startNs, opId), null) as seq,
  if(kind = 'communication', false, null) as seq_is_global,
  "count" as element_count,
  dataType as data_type,
  taskType as source_type,
  connectionId as correlation_id,
  launchOp as launch_op,
  launchNs as launch_ts_ns,
  launchTid as launch_tid,
from _staged_device_ops;

-- analysis.db's CommAnalyzerMatrix beside the db (rlwh.readers.ascend_db_matrix): one row
-- per link of each op of each step, as communication_matrix.json of a text export.
insert into communication_links by name
select * from _staged_communication_links;

-- analysis.db's CommAnalyzerBandwidth beside the db (rlwh.readers.ascend_comm_transfers): per
-- op and transport the profiler's transfer figures, as communication.json of a text export.
insert into collective_transfers by name
select * from _staged_collective_transfers;
