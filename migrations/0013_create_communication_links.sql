-- How fast the links are (issue 29): the Ascend profiler's communication matrix, one row per
-- link (source rank -> destination rank) of one collective or point-to-point op of one step,
-- from communication_matrix.json (text export) or analysis.db's CommAnalyzerMatrix (db
-- export). Keys as in 0001. Sizes and times as the file's MB (10^6 bytes) and ms, turned
-- into bytes and ns; the bandwidth as the file records it.

create table communication_links (
  run varchar not null,
  role varchar not null,
  rank_id integer not null,
  capture varchar not null,
  source_id bigint not null,
  source_row bigint not null,
  step integer,
  op_kind varchar,
  name varchar,
  "group" varchar,
  is_total boolean,
  op_name varchar,
  src_rank integer,
  dst_rank integer,
  transport_type varchar,
  size_bytes bigint,
  duration_ns bigint,
  bandwidth_gbps double
);
comment on table communication_links is 'One row per link of one collective or point-to-point op of one step, as the Ascend profiler''s communication matrix records it (communication_matrix.json, or analysis.db CommAnalyzerMatrix): transport, bytes, time and bandwidth from the rank to one peer.';
comment on column communication_links.run is 'Run name.';
comment on column communication_links.role is 'Role of the rank.';
comment on column communication_links.rank_id is 'Global rank whose file this is (the link''s sender).';
comment on column communication_links.capture is 'Rank dir the file came from.';
comment on column communication_links.source_id is 'The sources row (communication_matrix.json or the db export) this row came from.';
comment on column communication_links.source_row is '1-based position of the link in the file (step, then op, then link, in the file''s order), or 1-based row of CommAnalyzerMatrix in table order.';
comment on column communication_links.step is 'Step of the matrix entry (its step<n> key); NULL when the key names no number and the path names no step.';
comment on column communication_links.op_kind is 'collective or p2p: the section of the step the op is listed in.';
comment on column communication_links.name is 'The profiler''s op label before the @ (allreduce-top1, allreduce-middle, allreduce-bottom1, allreduce-total): the ops of one type with the longest, median and shortest time, and their total.';
comment on column communication_links."group" is 'HCCL group after the @ (as device_ops."group" from communication.json); NULL when the key has no @.';
comment on column communication_links.is_total is 'true for a <type>-total entry: the sum over every op of that type and group in the step on this link (the top/middle/bottom entries are a selection of those ops, one op possibly twice).';
comment on column communication_links.op_name is 'The HCCL op the entry stands for (Op Name, e.g. hcom_allReduce__586_2_1); NULL for a total.';
comment on column communication_links.src_rank is 'Sending rank of the link as the file writes it (the left side of "<src>-<dst>"): the rank''s number in the group, which is its global rank where the group holds every rank.';
comment on column communication_links.dst_rank is 'Receiving rank of the link, numbered as src_rank; src_rank = dst_rank is the copy inside the device (LOCAL).';
comment on column communication_links.transport_type is 'Transport Type: LOCAL (inside the device), HCCS or PCIE (devices of one node), RDMA (between nodes), SIO, SDMA.';
comment on column communication_links.size_bytes is 'Transit Size(MB) in bytes (MB = 10^6 bytes here), rounded to the byte.';
comment on column communication_links.duration_ns is 'Transit Time(ms) in ns, rounded to the ns.';
comment on column communication_links.bandwidth_gbps is 'Bandwidth(GB/s) as the file records it (Transit Size(MB) / Transit Time(ms); GB = 10^9 bytes).';

-- Files loaded before this migration landed no links: the next ingest reads them again
-- (communication_matrix.json was ignored; a db export reads CommAnalyzerMatrix now).
update sources set fingerprint = 'reload: communication_links added by migration 0013'
where fingerprint is not null
  and (kind = 'ascend_db' or (status = 'ignored' and path like '%ASCEND_PROFILER_OUTPUT/communication_matrix.json'));
