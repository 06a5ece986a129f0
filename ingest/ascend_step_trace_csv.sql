-- job: ascend_step_trace_csv
-- reader: rlwh.readers.ascend_usage:read_step_trace_time
-- fills: step_times
-- step_trace_time.csv: one row per step of the rank, each stage in ns.
insert into step_times by name
select * from _staged_step_times;
