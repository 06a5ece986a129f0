-- job: ascend_analysis_db
-- reader: rlwh.readers.ascend_analysis_db
-- fills: communication_links, collective_transfers
-- analysis.db where no db export of its capture is loaded beside it (none lies there, or
-- the text export beside it is loaded instead) and no communication_matrix.json is: its
-- CommAnalyzerMatrix, one row per link of each op of each step, as the db reader lands it
-- (rlwh.readers.ascend_db_matrix: MB and ms scaled to bytes and ns); and its
-- CommAnalyzerBandwidth (rlwh.readers.ascend_comm_transfers), unless communication.json is.
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

insert into collective_transfers by name
select * from _staged_collective_transfers;
