-- Roles that mean roles (issue 41 item 3): no table changes (the role column's comment is
-- rlwh.warehouse.schema.KEY_COLUMN_COMMENTS'), but files loaded before land under another
-- role now, so the next ingest reads them again (an unchanged fingerprint is
-- otherwise skipped):
-- - an NVTX export: its ranges are phases inside the export's role (its folder's, as for
--   every capture), no longer each a role named after the range;
-- - a file below a profiler-level folder (level0, level1, level2, level_none), an ignored
--   one of its capture too: the level is no role; the folder above it is.
update sources set fingerprint = 'reload: NVTX ranges are phases of their export''s role (migration 0017)'
where fingerprint is not null and kind = 'nvtx_jsonl';

update sources set fingerprint = 'reload: a profiler-level folder is no role (migration 0017)'
where fingerprint is not null and regexp_matches(path, '(^|/)level[_-]?([0-9]+|none)/', 'i');
