-- Memory answers that hold on real traces (CHANGELOG: Unreleased).
-- 1. cpu_ops keep the autograd link Kineto and torch_npu write on every op: "Sequence
--    number" and "Fwd thread id". A backward op (an autograd node) has seq_no >= 0 and
--    fwd_tid > 0; its forward op has the same seq_no and fwd_tid 0.
-- 2. torch_memory_events keep when their enclosing op started, so an allocation inside a
--    backward op can be traced to the forward op of its autograd node.
-- 3. One stack convention: innermost frame first. PyTorch stacks were stored outermost
--    first; they are reversed here (a new text, so a new stack_id) and every reference to
--    them from PyTorch rows is updated. Ascend stacks were innermost first already.
-- 4. The derived tables gain the attributed stack (stack_source) and, in the timeline,
--    the allocator that made each block, with that allocator's own running sum.
-- after: refresh derived tables

alter table cpu_ops add column seq_no bigint;
alter table cpu_ops add column fwd_tid bigint;
comment on column cpu_ops.seq_no is 'Autograd "Sequence number" of the op; -1 or NULL when it has none.';
comment on column cpu_ops.fwd_tid is '"Fwd thread id": > 0 on a backward op (an autograd node, whose forward op has the same seq_no and fwd_tid 0).';

alter table torch_memory_events add column op_ts_ns bigint;
comment on column torch_memory_events.op_ts_ns is 'Start of op_name (the innermost cpu_op enclosing the event on its thread), ns since the epoch.';

comment on column call_stacks.stack is 'Frames joined by a newline, innermost frame first (for every source).';
comment on column call_stacks.top_frame is 'Innermost frame of the stack.';

-- PyTorch stacks referenced from PyTorch rows, reversed to innermost first.
create temp table _reversed_torch_stacks as
with torch_sources as (
  select source_id from sources where kind = 'torch_trace'
),

referenced as (
  select distinct stack_id from cpu_ops
  where stack_id is not null and source_id in (select source_id from torch_sources)
  union
  select distinct stack_id from torch_memory_events
  where stack_id is not null and source_id in (select source_id from torch_sources)
),

reversed as (
  select s.stack_id as old_id, array_to_string(list_reverse(string_split(s.stack, chr(10))), chr(10)) as stack
  from call_stacks as s
  where s.stack_id in (select stack_id from referenced)
)

select
  old_id, stack, (md5_number_lower(stack) >> 1)::bigint as new_id,
  split_part(stack, chr(10), 1) as top_frame, len(string_split(stack, chr(10)))::integer as depth,
from reversed;

insert or ignore into call_stacks (stack_id, stack, top_frame, depth)
select new_id, stack, top_frame, depth from _reversed_torch_stacks where new_id <> old_id;

update cpu_ops set stack_id = r.new_id
from _reversed_torch_stacks as r
where cpu_ops.stack_id = r.old_id
  and cpu_ops.source_id in (select source_id from sources where kind = 'torch_trace');

update torch_memory_events set stack_id = r.new_id
from _reversed_torch_stacks as r
where torch_memory_events.stack_id = r.old_id
  and torch_memory_events.source_id in (select source_id from sources where kind = 'torch_trace');

-- Old outermost-first texts that nothing references any more.
delete from call_stacks
where stack_id in (select old_id from _reversed_torch_stacks where new_id <> old_id)
  and stack_id not in (select stack_id from cpu_ops where stack_id is not null)
  and stack_id not in (select stack_id from torch_memory_events where stack_id is not null);

drop table _reversed_torch_stacks;

alter table _memory_record_ops add column attributed_stack_id bigint;
alter table _memory_record_ops add column stack_source varchar;

alter table _memory_timeline add column allocator varchar;
alter table _memory_timeline add column allocator_live_bytes bigint;
alter table _memory_timeline add column stack_source varchar;
alter table _memory_timeline add column release_inferred boolean;
alter table _memory_timeline add column clock varchar;

-- The PyTorch blocks of memory_blocks, paired and attributed once at ingest.
create table _torch_memory_blocks (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint,
  device varchar,
  origin_row bigint,
  name varchar,
  alloc_ns bigint,
  release_ns bigint,
  release_inferred boolean,
  size_bytes bigint,
  op_stack_id bigint,
  stack_id bigint,
  stack_source varchar,
  allocated_after_alloc_bytes bigint,
  reserved_after_alloc_bytes bigint,
  allocated_after_release_bytes bigint,
  reserved_after_release_bytes bigint
);
comment on table _torch_memory_blocks is 'Derived (rlwh ingest): PyTorch [memory] allocations paired with their release by (device, addr) in time order, with the stack each one justifies.';

-- Each call stack's user_frame under the [stacks] rule it was computed with: a regex
-- that differs per row would be compiled per row, so rlwh computes them once per stack
-- (and again for every stack when the rule changes).
create table _stack_user_frames (
  stack_id bigint primary key,
  user_frame varchar,
  rule varchar not null
);
comment on table _stack_user_frames is 'Derived (rlwh ingest, rlwh init): the innermost non-library frame of each call_stacks row, under the library-frame rule in rule.';
