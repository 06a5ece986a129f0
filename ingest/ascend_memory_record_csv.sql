-- job: ascend_memory_record_csv
-- reader: rlwh.readers.ascend_usage:read_memory_record
-- fills: memory_usage
-- memory_record.csv: the allocator's totals over time per component (APP, PTA, GE, PTA+GE),
-- times in ns and sizes in bytes (the reader converts).
insert into memory_usage by name
select * from _staged_memory_usage;
