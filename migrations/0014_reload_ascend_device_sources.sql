-- Device time true on every export (issue 42): no table changes, but files loaded before
-- land other rows now, so the next ingest reads them again (an unchanged fingerprint is
-- otherwise skipped):
-- - a trace_view.json whose tasks the trace typed "Other" or not at all (an older
--   torch_npu): their kind comes from kernel_details.csv or their name now (they were
--   'other', and the kernels among them were lost from compute);
-- - an analysis.db that was ignored: with no db export loaded beside it, its
--   CommAnalyzerMatrix lands in communication_links now.
update sources set fingerprint = 'reload: device_ops kinds of untyped Ascend tasks (migration 0014)'
where fingerprint is not null and kind = 'ascend_trace'
  and source_id in (select source_id from device_ops where source_type in ('Other', 'Ascend Hardware'));

update sources set fingerprint = 'reload: analysis.db may land communication_links (migration 0014)'
where fingerprint is not null and status = 'ignored' and path like '%ASCEND_PROFILER_OUTPUT/analysis.db';
