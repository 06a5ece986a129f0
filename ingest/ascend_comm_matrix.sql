-- job: ascend_comm_matrix
-- reader: rlwh.readers.ascend_comm_matrix
-- fills: communication_links
-- communication_matrix.json (ASCEND_PROFILER_OUTPUT of a text export): one row per link of
-- each op of each step. The reader walks the JSON (step -> collective / p2p -> op@group ->
-- src-dst -> figures) and scales MB and ms to bytes and ns; the bandwidth lands as written.
insert into communication_links by name
select
  run, role, rank_id, capture, source_id, source_row,
  step,
  op_kind,
  name,
  "group",
  is_total,
  op_name,
  src_rank,
  dst_rank,
  transport_type,
  size_bytes,
  duration_ns,
  bandwidth_gbps,
from _staged_communication_links;
