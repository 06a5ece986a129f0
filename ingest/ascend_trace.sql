-- job: ascend_trace
-- reader: rlwh.readers.ascend_trace
-- fills: cpu_ops, call_stacks, ranges, device_ops
-- trace_view.json: cpu_op events, their call stacks (each stack text stored once, shared
-- by every run), MSTX ranges and marks, the Overlap Analysis ranges, and the device rows
-- (rlwh.readers.ascend_device: kernels and copies of "Ascend Hardware", collectives of
-- HCCL's "Group <g> Communication" threads; a collective's own tasks are not repeated).
insert into cpu_ops by name
select * from _staged_cpu_ops;

insert or ignore into call_stacks by name
select * from _staged_call_stacks;

insert into ranges by name
select * from _staged_ranges;

-- The trace names no device: ranks.device (from profiler_info) does.
insert into device_ops by name
select
  run, role, rank_id, capture, source_id, step,
  null as device,
  "Physic Stream Id" as stream,
  name,
  kind,
  start_ns,
  end_ns,
  collective,
  -- HCCL's thread "Group 0 Communication" names the group "Group 0".
  if(kind = 'communication', regexp_replace(thread, '\s*Communication$', ''), null) as "group",
  if(kind = 'communication',
     row_number() over (partition by source_id, kind = 'communication', thread order by start_ns, end_ns), null) as seq,
  if(kind = 'communication', false, null) as seq_is_global,
  "count" as element_count,
  data_type,
  coalesce("Task Type", process) as source_type,
  connection_id as correlation_id,
  launch_op,
  launch_ts_ns,
  launch_tid,
from _staged_device_ops;
