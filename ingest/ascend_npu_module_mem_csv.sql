-- job: ascend_npu_module_mem_csv
-- reader: rlwh.readers.ascend_usage:read_npu_module_mem
-- fills: npu_module_memory
-- npu_module_mem.csv: device memory reserved by each CANN module over time.
-- The reader runs `fields` and `read npu_module_memory` (rlwh.readers.csv_job, over a batch
-- of files) when the header spells its fields as here; other units or a row
-- they cannot read go to the reader's row-by-row read, which names a bad row.

-- fields:
select * from (values
    ('Component',          'VARCHAR'),
    ('Module',             'VARCHAR'),          -- another name of Component
    ('Timestamp(us)',      'DECIMAL(20,3)'),    -- µs text ending in a TAB, exact to the ns
    ('Total Reserved(MB)', 'DECIMAL(38,20)'),   -- a byte is 20 decimals of a MB
    ('Device',             'VARCHAR'),
    ('Device Type',        'VARCHAR')           -- another name of Device
) as f(field, type);

-- read npu_module_memory:
select
    _file,
    _source_row                                                       as source_row,
    nullif(trim_blank(coalesce("Component", "Module")), '')           as module,
    ("Timestamp(us)" * 1000)::bigint                                  as ts_ns,
    round("Total Reserved(MB)" * 1048576)::bigint                     as total_reserved_bytes,
    nullif(trim_blank(coalesce("Device", "Device Type")), '')         as device
from _csv;

-- land:
insert into npu_module_memory by name
select * from _staged_npu_module_memory;
