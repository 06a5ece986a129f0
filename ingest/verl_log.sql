-- job: verl_log
-- reader: rlwh.readers.verl_log
-- fills: train_metrics
-- VeRL console log: one row per key:value of each step record. The reader hands
-- line, step, key and value as printed (np.float64(0.1), 1e-06, nan, True); here the
-- key becomes metric and the value a DOUBLE, a numpy repr unwrapped first.
insert into train_metrics by name
select
  run,
  role,
  rank_id,
  capture,
  source_id,
  cast(step as integer) as step,
  key as metric,
  case
    when lower(value) = 'true' then 1.0
    when lower(value) = 'false' then 0.0
    else cast(regexp_replace(value, '^np\.[A-Za-z_][A-Za-z0-9_]*\((.*)\)$', '\1') as double)
  end as value,
  line
from _staged_train_metrics;
