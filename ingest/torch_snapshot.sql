-- job: torch_snapshot
-- reader: rlwh.readers.torch_snapshot
-- fills: snapshot_segments, snapshot_blocks, snapshot_trace_blocks, call_stacks
-- PyTorch memory snapshot pickle (torch.cuda.memory._snapshot(), torch_npu's alike), read
-- with no pickle globals allowed: its segments and blocks at snapshot time, and the blocks
-- its device_traces record (alloc paired with free_completed), stacks innermost first.
insert into snapshot_segments by name
select * from _staged_snapshot_segments;

insert into snapshot_blocks by name
select * from _staged_snapshot_blocks;

insert into snapshot_trace_blocks by name
select * from _staged_snapshot_trace_blocks;

insert or ignore into call_stacks by name
select * from _staged_call_stacks;
