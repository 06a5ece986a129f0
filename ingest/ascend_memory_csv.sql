-- job: ascend_memory_csv
-- reader: rlwh.readers.ascend_csv
-- fills: memory_records
-- operator_memory.csv (torch_npu): one memory_records row per allocation, as it is.
-- The reader runs `fields` and `read memory_records` (rlwh.readers.csv_job, over a batch of files);
-- a row they cannot read sends the file to the reader's row-by-row read, which keeps every
-- other row and names the bad ones. Times are µs text ending in a TAB ("…661.420\t"):
-- DECIMAL(20,3) reads them exact, and a 4th decimal rounds half away from zero. read_csv
-- parses them in its own loop, TAB and all: on 450 k rows the job took 1.6-2.0 CPU-s so, and
-- 2.4-2.6 with the times read as text, trimmed and turned to ns by 64-bit arithmetic on the
-- digits (readers.base.us_text_to_ns_sql; DuckDB 2.0, 2026-12-02). Durations fit
-- DECIMAL(18,3) (up to 31 years), which DuckDB keeps in 64 bits: turning one into ns costs
-- 1/30 of a 20-digit DECIMAL's 128-bit arithmetic (64 ranks: 0.45 s less).

-- fields:
select * from (values
    ('Name',                           'VARCHAR'),
    ('Size(KB)',                       'DOUBLE'),
    ('Allocation Time(us)',            'DECIMAL(20,3)'),
    ('Release Time(us)',               'DECIMAL(20,3)'),
    ('Active Release Time(us)',        'DECIMAL(20,3)'),
    ('Duration(us)',                   'DECIMAL(18,3)'),
    ('Active Duration(us)',            'DECIMAL(18,3)'),
    ('Allocation Total Allocated(MB)', 'DOUBLE'),
    ('Allocation Total Reserved(MB)',  'DOUBLE'),
    ('Allocation Total Active(MB)',    'DOUBLE'),
    ('Release Total Allocated(MB)',    'DOUBLE'),
    ('Release Total Reserved(MB)',     'DOUBLE'),
    ('Release Total Active(MB)',       'DOUBLE'),
    ('Stream Ptr',                     'VARCHAR'),
    ('Device Type',                    'VARCHAR')
) as f(field, type);

-- read memory_records:
-- µs -> ns exactly; KB and MB -> bytes rounded half away from zero; text without the
-- spaces and TABs the profiler leaves, empty as NULL.
select
    _file,
    _source_row                                                        as source_row,
    nullif(trim_blank("Name"), '')                                      as name,
    round("Size(KB)" * 1024)::bigint                                   as size_bytes,
    ("Allocation Time(us)" * 1000)::bigint                             as alloc_ns,
    ("Release Time(us)" * 1000)::bigint                                as release_ns,
    ("Active Release Time(us)" * 1000)::bigint                         as active_release_ns,
    ("Duration(us)" * 1000)::bigint                                    as duration_ns,
    ("Active Duration(us)" * 1000)::bigint                             as active_duration_ns,
    round("Allocation Total Allocated(MB)" * 1048576)::bigint          as alloc_total_allocated_bytes,
    round("Allocation Total Reserved(MB)" * 1048576)::bigint           as alloc_total_reserved_bytes,
    round("Allocation Total Active(MB)" * 1048576)::bigint             as alloc_total_active_bytes,
    round("Release Total Allocated(MB)" * 1048576)::bigint             as release_total_allocated_bytes,
    round("Release Total Reserved(MB)" * 1048576)::bigint              as release_total_reserved_bytes,
    round("Release Total Active(MB)" * 1048576)::bigint                as release_total_active_bytes,
    nullif(trim_blank("Stream Ptr"), '')                                as stream_ptr,
    nullif(trim_blank("Device Type"), '')                               as device
from _csv;

-- land:
insert into memory_records by name
select * from _staged_memory_records;
