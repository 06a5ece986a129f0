-- job: ascend_npu_module_mem_csv
-- reader: rlwh.readers.ascend_usage:read_npu_module_mem
-- fills: npu_module_memory
-- npu_module_mem.csv: device memory reserved by each CANN module over time.
insert into npu_module_memory by name
select * from _staged_npu_module_memory;
