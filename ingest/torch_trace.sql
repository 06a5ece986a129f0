-- job: torch_trace
-- reader: rlwh.readers.torch_trace
-- fills: cpu_ops, call_stacks, ranges, torch_memory_events
-- PyTorch (Kineto) trace: cpu_op events with the python_function chain that encloses them
-- as their call stack, record_function ranges, and the "[memory]" events.
insert into cpu_ops by name
select * from _staged_cpu_ops;

insert or ignore into call_stacks by name
select * from _staged_call_stacks;

insert into ranges by name
select * from _staged_ranges;

insert into torch_memory_events by name
select * from _staged_torch_memory_events;
