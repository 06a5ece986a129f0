-- job: ascend_step_trace_csv
-- reader: rlwh.readers.ascend_usage:read_step_trace_time
-- fills: step_times
-- step_trace_time.csv: one row per step of the rank, each stage in ns.
-- The reader runs `fields` and `read step_times` (rlwh.readers.csv_job, over a batch of files)
-- when the header spells its fields as here; otherwise, or for a row they cannot read, the
-- reader's row-by-row read, which names a bad row.

-- fields:
-- The stage columns carry no unit in their names: they are µs.
select * from (values
    ('Step',                                               'VARCHAR'),  -- a whole number, checked below
    ('Computing',                                          'DECIMAL(20,3)'),
    ('Communication(Not Overlapped)',                      'DECIMAL(20,3)'),
    ('Overlapped',                                         'DECIMAL(20,3)'),
    ('Communication',                                      'DECIMAL(20,3)'),
    ('Free',                                               'DECIMAL(20,3)'),
    ('Stage',                                              'DECIMAL(20,3)'),
    ('Bubble',                                             'DECIMAL(20,3)'),
    ('Communication(Not Overlapped and Exclude Receive)',  'DECIMAL(20,3)'),
    ('Preparing',                                          'DECIMAL(20,3)')
) as f(field, type);

-- read step_times:
-- µs -> ns, exact.
select
    _file,
    _source_row                                                                  as source_row,
    -- read_csv's BIGINT would round "50.5": a step that is not plain digits fails the read,
    -- and the row-by-row read names its row.
    case when nullif(trim_blank("Step"), '') is null then null
         when regexp_full_match(trim_blank("Step"), '[+-]?[0-9]+') then trim_blank("Step")::bigint
         else error('not a whole number: ' || "Step") end                      as step,
    ("Computing" * 1000)::bigint                                                 as computing_ns,
    ("Communication(Not Overlapped)" * 1000)::bigint                             as communication_not_overlapped_ns,
    ("Overlapped" * 1000)::bigint                                                as overlapped_ns,
    ("Communication" * 1000)::bigint                                             as communication_ns,
    ("Free" * 1000)::bigint                                                      as free_ns,
    ("Stage" * 1000)::bigint                                                     as stage_ns,
    ("Bubble" * 1000)::bigint                                                    as bubble_ns,
    ("Communication(Not Overlapped and Exclude Receive)" * 1000)::bigint         as communication_not_overlapped_exclude_receive_ns,
    ("Preparing" * 1000)::bigint                                                 as preparing_ns
from _csv;

-- land:
insert into step_times by name
select * from _staged_step_times;
