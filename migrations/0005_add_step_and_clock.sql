-- Captures are identified by their path relative to the profile dir (two captures never
-- merge, whatever their names); rows carry the training step their layout names (VeRL's
-- <save_path>/<step>/, step_<n>/ folders); ranges carry their clock, so nothing puts the
-- nsys session clock on one axis with epoch times; every file under the profile dir has a
-- sources row, those rlwh does not load with status ignored; msprobe's GMM layout has no
-- role folder, so a GMM row's role may be NULL.
alter table sources add column step integer;
alter table ranks add column step integer;
alter table memory_records add column step integer;
alter table cpu_ops add column step integer;
alter table ranges add column step integer;
alter table torch_memory_events add column step integer;
alter table ranges add column clock varchar default 'epoch';
alter table gmm_expert_load alter column role drop not null;

comment on column sources.step is 'Training step the file''s path names (a step_<n>, step<n> or all-digit folder above it); NULL when none.';
comment on column ranks.step is 'Training step the capture''s path names; NULL when none.';
comment on column memory_records.step is 'Training step the capture''s path names; NULL when none.';
comment on column cpu_ops.step is 'Training step the capture''s path names; NULL when none.';
comment on column ranges.step is 'Training step the capture''s path names; NULL when none.';
comment on column torch_memory_events.step is 'Training step the capture''s path names; NULL when none.';
comment on column ranges.clock is 'Clock of start_ns/end_ns: epoch (ns since 1970 UTC), or nsys_session (an NVTX export that does not say how its session clock maps to the epoch).';

comment on column sources.capture is 'Capture the file belongs to: its path relative to the profile dir (an Ascend capture dir, a GMM dump folder, or the file itself); NULL for an ignored file outside any capture.';
comment on column sources.status is 'ok, partial (rows salvaged from a damaged file), failed (no rows), ignored (a file rlwh does not load; message says why) or skipped (unchanged since the last ingest; rows are those loaded then).';
comment on column sources.kind is 'Source format: ascend_memory_csv, ascend_trace, ascend_info, torch_trace, nvtx_jsonl, gmm_group_list, or ignored.';
comment on column sources.message is 'What went wrong, naming the file and the row or byte offset; for an ignored file why it is not loaded; a guess ingest made (rank 0 for a single-process trace); NULL when ok.';
comment on column ranks.capture is 'The capture''s path relative to the profile dir (rank dir or trace file): several captures of one rank stay apart.';
comment on column ranks.capture_started_ns is 'Start of the capture, ns since the epoch: its earliest recorded event (Ascend: else the profiler start from profiler_info, else the local time in the dir name read in the profiler''s time zone).';
comment on column memory_records.capture is 'Capture (rank dir path relative to the profile dir) the CSV came from.';
comment on column cpu_ops.capture is 'Capture (rank dir or trace file path relative to the profile dir) the event came from.';
comment on column ranges.capture is 'Capture (rank dir or trace file path relative to the profile dir) the range came from.';
comment on column ranges.start_ns is 'Start, ns on the row''s clock (epoch ns unless clock says otherwise).';
comment on column ranges.end_ns is 'End, ns on the row''s clock (= start_ns for a mark).';
comment on column torch_memory_events.capture is 'Trace file (path relative to the profile dir) the event came from.';
comment on column gmm_expert_load.capture is 'The dump folder (path relative to the profile dir of the folder holding dump_tensor_data): one rank''s dump of one step.';
comment on column gmm_expert_load.role is 'Role: the nearest folder above the dump that is no step, rank or dump folder; NULL when there is none (msprobe''s step<n>/rank<k>/ layout).';
comment on column gmm_expert_load.rank_id is 'Global rank (the rank<k> / rank_<k> folder).';
comment on column gmm_expert_load.step is 'Training step (the step_<n> / step<n> folder).';

-- Rows loaded before this migration carry the old capture (the dir or file name, under
-- which captures of two steps merged) and no step. Their files must be read again: a
-- fingerprint no file has makes the next `rlwh ingest` of each run reload every file.
update sources set fingerprint = 'reload: captures are named by their path since migration 0005'
where fingerprint is not null;
