-- job: nvtx_jsonl
-- reader: rlwh.readers.nvtx
-- fills: ranges
-- Nsight Systems jsonlines export: NVTX ranges and marks; each range's role is its name.
insert into ranges by name
select * from _staged_ranges;
