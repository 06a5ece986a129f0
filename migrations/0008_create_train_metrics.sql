-- VeRL training logs (issue 23): the metrics of every `step:N - key:value - ...` record
-- of a console log, one row per metric. A log is one capture (its path): a run resumed
-- from a checkpoint is several logs that repeat step numbers, so a step alone is no key.
-- The log's place names role and rank only where its folders do: NULL otherwise.

create table train_metrics (
  run varchar not null,
  role varchar,
  rank_id integer,
  capture varchar not null,
  source_id bigint not null,
  step integer not null,
  metric varchar not null,
  value double,
  line bigint not null
);
comment on table train_metrics is 'One row per metric of one step record of a VeRL training log (step:N - key:value - ...): what the trainer printed for that optimizer step.';
comment on column train_metrics.run is 'Run name.';
comment on column train_metrics.role is 'Role the log''s folders name (the nearest folder that is no rank, step, capture or wandb folder); NULL when none does.';
comment on column train_metrics.rank_id is 'Rank the log''s path names (rank<k> folder or file name); NULL when none does.';
comment on column train_metrics.capture is 'The log''s path relative to the profile dir.';
comment on column train_metrics.source_id is 'The sources row (the log file) this row came from.';
comment on column train_metrics.step is 'Step of the record (its step:N); a step printed twice gives two records, told apart by line.';
comment on column train_metrics.metric is 'Metric key as printed, e.g. timing_s/gen, actor/entropy, perf/throughput, train/lr(1e-3).';
comment on column train_metrics.value is 'Value as a DOUBLE: plain numbers and numpy reprs (np.float64(x), np.int32(n)) alike, True/False as 1/0; NaN and inf kept as such.';
comment on column train_metrics.line is '1-based line of the record in the file (its first line when it wraps).';
