-- job: ascend_kernel_details_csv
-- reader: rlwh.readers.ascend_kernels
-- fills: device_ops
-- kernel_details.csv, in a capture without trace_view.json (else the trace's device rows
-- land and this file is ignored): one row per kernel and per HCCL op. The reader runs
-- `fields` and `read kernel_details` (rlwh.readers.csv_job) when the
-- header spells its fields as here, else its row-by-row read, which names a bad row; it
-- then adds each row's kind, collective and HCCL group (from communication.json beside it).

-- fields:
select * from (values
    ('Step Id',           'VARCHAR'),         -- the profiler's step; absent without a schedule
    ('Name',              'VARCHAR'),
    ('Type',              'VARCHAR'),         -- the op type (N/A at profiler level 0)
    ('Accelerator Core',  'VARCHAR'),         -- AI_CORE, AI_VECTOR_CORE, MIX_AIV, HCCL, N/A, ...
    ('Start Time(us)',    'DECIMAL(20,3)'),   -- µs text ending in a TAB, exact to the ns
    ('Duration(us)',      'DECIMAL(24,6)'),
    ('Stream ID',         'VARCHAR')          -- N/A for an HCCL op
) as f(field, type);

-- read kernel_details:
-- µs -> ns, rounded half away from zero; text trimmed, empty as NULL.
select
    _file,
    _source_row                                               as source_row,
    nullif(trim_blank("Step Id"), '')                         as step_id,
    nullif(trim_blank("Name"), '')                            as name,
    nullif(trim_blank("Type"), '')                            as op_type,
    nullif(trim_blank("Accelerator Core"), '')                as accelerator_core,
    ("Start Time(us)" * 1000)::bigint                         as start_ns,
    round("Duration(us)" * 1000)::bigint                      as duration_ns,
    nullif(trim_blank("Stream ID"), '')                       as stream_id
from _csv;

-- land:
-- The export names no device (ranks.device does) and links no launch.
insert into device_ops by name
select
  run, role, rank_id, capture, source_id,
  coalesce(step_id, step) as step,
  null as device,
  stream,
  name,
  kind,
  start_ns,
  end_ns,
  collective,
  "group",
  if(kind = 'communication',
     row_number() over (partition by kind = 'communication', "group" order by start_ns, end_ns), null) as seq,
  if(kind = 'communication', false, null) as seq_is_global,
  null as element_count,
  null as data_type,
  coalesce(accelerator_core, if(kind = 'communication', 'HCCL', 'kernel')) as source_type,
  null as correlation_id,
  null as launch_op,
  null as launch_ts_ns,
  null as launch_tid,
from _staged_device_ops;
