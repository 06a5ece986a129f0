-- job: ascend_trace
-- reader: rlwh.readers.ascend_trace
-- fills: cpu_ops, call_stacks, ranges
-- trace_view.json: cpu_op events, their call stacks (each stack text stored once, shared
-- by every run), MSTX ranges and marks, and the Overlap Analysis ranges.
insert into cpu_ops by name
select * from _staged_cpu_ops;

insert or ignore into call_stacks by name
select * from _staged_call_stacks;

insert into ranges by name
select * from _staged_ranges;
