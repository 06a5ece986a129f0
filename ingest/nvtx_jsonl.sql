-- job: nvtx_jsonl
-- reader: rlwh.readers.nvtx
-- fills: ranges
-- Nsight Systems jsonlines export: NVTX ranges and marks. A range is a phase inside the
-- role of its export (from its folder, --role or [roles], as for every capture): its name
-- is the phase, never the role.
-- The reader hands each NVTX_EVENTS record's own fields (eventType, start, end, globalTid),
-- its text and domain looked up, and the clock its times count from (session_start_ns).
insert into ranges by name
select
    * exclude ("text", "eventType", "start", "end", "globalTid", session_start_ns),
    'nvtx'                                            as source,
    "text"                                            as name,
    session_start_ns + "start"                        as start_ns,
    case when "eventType" = 34 then session_start_ns + "start"     -- a mark (34) is an instant
         else session_start_ns + "end" end            as end_ns,
    ("globalTid" >> 24) & 16777215                    as pid,      -- as the nsys stats scripts decode it
    "globalTid" & 16777215                            as tid
from _staged_ranges;
