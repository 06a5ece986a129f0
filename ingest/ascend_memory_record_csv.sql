-- job: ascend_memory_record_csv
-- reader: rlwh.readers.ascend_usage:read_memory_record
-- fills: memory_usage
-- memory_record.csv: the allocator's totals over time per component (APP, PTA, GE, PTA+GE).
-- The reader runs `fields` and `read memory_usage` (rlwh.readers.csv_job, over a batch of files)
-- when the header spells its fields as here; a header in other units (Timestamp(ns),
-- Total Reserved(KB), ...) or a row they cannot read goes to the reader's row-by-row read,
-- which takes the unit from each header and names a bad row.

-- fields:
select * from (values
    ('Component',           'VARCHAR'),
    ('Tag',                 'VARCHAR'),         -- older name of Component
    ('Timestamp(us)',       'DECIMAL(20,3)'),   -- µs text ending in a TAB, exact to the ns
    ('Total Allocated(MB)', 'DECIMAL(38,20)'),  -- a byte is 20 decimals of a MB
    ('Total Reserved(MB)',  'DECIMAL(38,20)'),
    ('Total Active(MB)',    'DECIMAL(38,20)'),
    ('Stream Ptr',          'VARCHAR'),
    ('Device Type',         'VARCHAR'),
    ('Device',              'VARCHAR')          -- another name of Device Type
) as f(field, type);

-- read memory_usage:
-- µs -> ns; MB -> bytes rounded half away from zero; text trimmed, empty as NULL.
select
    _file,
    _source_row                                                       as source_row,
    nullif(trim_blank(coalesce("Component", "Tag")), '')              as component,
    ("Timestamp(us)" * 1000)::bigint                                  as ts_ns,
    round("Total Allocated(MB)" * 1048576)::bigint                    as total_allocated_bytes,
    round("Total Reserved(MB)" * 1048576)::bigint                     as total_reserved_bytes,
    round("Total Active(MB)" * 1048576)::bigint                       as total_active_bytes,
    nullif(trim_blank("Stream Ptr"), '')                              as stream_ptr,
    nullif(trim_blank(coalesce("Device Type", "Device")), '')         as device
from _csv;

-- land:
insert into memory_usage by name
select * from _staged_memory_usage;
