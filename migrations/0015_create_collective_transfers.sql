-- How fast a collective's links moved its bytes (issue 42): the Ascend profiler's per-op,
-- per-transport transfer figures, from communication.json (text export) or analysis.db's
-- CommAnalyzerBandwidth (db export). Keys as in 0001. Sizes and times as the file's MB
-- (10^6 bytes) and ms, turned into bytes and ns; the bandwidth as the file records it.

create table collective_transfers (
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
  transport_type varchar,
  size_bytes bigint,
  duration_ns bigint,
  bandwidth_gbps double
);
comment on table collective_transfers is 'One row per transport of one HCCL op of one step of a rank, as the Ascend profiler sums its transfer tasks (communication.json''s Communication Bandwidth Info, or analysis.db CommAnalyzerBandwidth): the bytes they moved, the time they ran, and the link''s bandwidth while it transferred.';
comment on column collective_transfers.run is 'Run name.';
comment on column collective_transfers.role is 'Role of the rank.';
comment on column collective_transfers.rank_id is 'Global rank whose file this is.';
comment on column collective_transfers.capture is 'Rank dir the file came from.';
comment on column collective_transfers.source_id is 'The sources row (communication.json, or the db export or analysis.db) this row came from.';
comment on column collective_transfers.source_row is '1-based position of the (op, transport) in the file (step, then op, then transport, in the file''s order), or 1-based row of CommAnalyzerBandwidth in table order.';
comment on column collective_transfers.step is 'Step of the entry (its step<n> key); NULL when the key names no number.';
comment on column collective_transfers.op_kind is 'collective or p2p: the section of the step the op is listed in.';
comment on column collective_transfers.name is 'The HCCL op before the @ (hcom_allReduce__586_0_1), as device_ops.name names it.';
comment on column collective_transfers."group" is 'HCCL group after the @; NULL when the key has no @.';
comment on column collective_transfers.transport_type is 'The transport: HCCS, PCIE or SIO (devices of one node), RDMA (between nodes), SDMA (the copies over HCCS, PCIE and SIO together), LOCAL.';
comment on column collective_transfers.size_bytes is 'Transit Size(MB) in bytes (MB = 10^6 bytes here): what the op''s transfer tasks moved over the transport.';
comment on column collective_transfers.duration_ns is 'Transit Time(ms) in ns: how long those tasks ran (summed), not the op''s duration.';
comment on column collective_transfers.bandwidth_gbps is 'Bandwidth(GB/s) as the file records it (Transit Size / Transit Time; GB = 10^9 bytes): the link''s speed while it transferred.';

-- communication.json was ignored where trace_view.json lies beside it: read it again.
update sources set fingerprint = 'reload: collective_transfers added by migration 0015'
where fingerprint is not null
  and (kind = 'ascend_db' or path like '%ASCEND_PROFILER_OUTPUT/communication.json');
