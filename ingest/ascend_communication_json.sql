-- job: ascend_communication_json
-- reader: rlwh.readers.ascend_comm_transfers
-- fills: collective_transfers
-- communication.json (ASCEND_PROFILER_OUTPUT of a text export): per step and HCCL op, the
-- profiler's transfer figures by transport ("Communication Bandwidth Info": Transit Size(MB),
-- Transit Time(ms), Bandwidth(GB/s)); MB and ms scaled to bytes and ns, the bandwidth as
-- written. (The kernel_details.csv reader also reads it, for each collective's HCCL group.)
insert into collective_transfers by name
select
  run, role, rank_id, capture, source_id, source_row,
  step,
  op_kind,
  name,
  "group",
  transport_type,
  size_bytes,
  duration_ns,
  bandwidth_gbps,
from _staged_collective_transfers;
