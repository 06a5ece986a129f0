-- job: ascend_analysis_db
-- reader: rlwh.readers.ascend_analysis_db
-- fills: communication_links
-- analysis.db where no db export of its capture is loaded beside it (none lies there, or
-- the text export beside it is loaded instead) and no communication_matrix.json is: its
-- CommAnalyzerMatrix, one row per link of each op of each step, as the db reader lands it
-- (rlwh.readers.ascend_db_matrix: MB and ms scaled to bytes and ns).
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
