-- job: torch_trace
-- reader: rlwh.readers.torch_trace
-- fills: cpu_ops, call_stacks, ranges, torch_memory_events, device_ops
-- PyTorch (Kineto) trace: cpu_op events with the python_function chain that encloses them
-- as their call stack, record_function ranges, the "[memory]" events, and the device
-- activity (rlwh.readers.torch_device: kernels, memcpy, memset, MTIA device events).
insert into cpu_ops by name
select * from _staged_cpu_ops;

insert or ignore into call_stacks by name
select * from _staged_call_stacks;

insert into ranges by name
select * from _staged_ranges;

insert into torch_memory_events by name
select * from _staged_torch_memory_events;

insert into device_ops by name
select
  run, role, rank_id, capture, source_id, step,
  -- args.device: the CUDA (or ROCm) device index; an MTIA event names its device by pid.
  if(cat = 'mtia_ccp_events', 'mtia:' || pid, 'cuda:' || device) as device,
  stream,
  name,
  kind,
  ts_ns as start_ns,
  ts_ns + coalesce(dur_ns, 0) as end_ns,
  collective,
  "Process Group Name" as "group",
  if(kind = 'communication',
     coalesce("Seq", row_number() over (partition by kind = 'communication', "Process Group Name"
                                        order by ts_ns, dur_ns)), null) as seq,
  -- Kineto's Seq numbers a process group's collectives alike on every rank; a point-to-point
  -- op's counts per pair of ranks, so it is no shared number.
  if(kind = 'communication',
     "Seq" is not null and "Process Group Name" is not null and coalesce(collective, '') not in ('send', 'recv', 'sendrecv'),
     null) as seq_is_global,
  "In msg nelems" as element_count,
  dtype as data_type,
  cat as source_type,
  correlation as correlation_id,
  launch_op,
  launch_ts_ns,
  launch_tid,
from _staged_device_ops;
