-- Each raw call-stack text a trace_view.json held, by the MD5 of its bytes, and the
-- call_stacks row it normalizes to (issue 37 item 3): a batch of ranks running the same
-- code looks its texts up here and normalizes only the new ones. A cache: a text missing
-- from it is normalized again, so tables built elsewhere (a Ray worker's capture) need not
-- fill it.

create table internal.stack_texts (
  text_md5 blob primary key,
  stack_id bigint not null
);
comment on table internal.stack_texts is 'Cache (rlwh ingest): the call_stacks row (stack_id) each raw call-stack text of a trace_view.json normalizes to, by the MD5 of the raw text (16 bytes).';
