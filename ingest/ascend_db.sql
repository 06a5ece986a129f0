-- job: ascend_db
-- reader: rlwh.readers.ascend_db
-- fills: memory_records, memory_usage, npu_module_memory, step_times, cpu_ops, call_stacks, ranges
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
