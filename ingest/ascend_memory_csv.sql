-- job: ascend_memory_csv
-- reader: rlwh.readers.ascend_csv
-- fills: memory_records
-- operator_memory.csv: every row as it is, times in ns, sizes in bytes (the reader converts).
insert into memory_records by name
select * from _staged_memory_records;
