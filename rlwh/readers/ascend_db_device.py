"""ascend_pytorch_profiler_<rank>.db's device activity -> device_ops staging (called by
rlwh.readers.ascend_db).

The db splits one activity over tables: a kernel is a TASK row with a COMPUTE_TASK_INFO
row (its name and type, by globalTaskId); a collective is a COMMUNICATION_OP row, and
the tasks it ran are TASK rows with COMMUNICATION_TASK_INFO rows. Each activity lands
once: kernels and other tasks from TASK, collectives from COMMUNICATION_OP, a
collective's own tasks not again. Text is STRING_IDS ids; HCCL data types are
ENUM_HCCL_DATA_TYPE ids. The launch: TASK.connectionId is one of the ids CONNECTION_IDS
lists for a PYTORCH_API row (the op torch_npu's task queue ran). The step: the STEP_TIME
span holding the launch (the task's start when unlinked). Rows keep the db's field names;
ingest/ascend_db.sql maps them to device_ops' columns. Only tasks with a
COMPUTE_TASK_INFO row are kernels (kind compute): the profiler's Computing counts those.
"""

from __future__ import annotations

import re
import sqlite3

import pyarrow as pa

from rlwh.readers.device_names import ASCEND_MEMCPY_TASK_TYPES, collective_of

_I, _S = pa.int64(), pa.string()
SCHEMA = pa.schema([
    ("startNs", _I), ("endNs", _I), ("deviceId", _I), ("streamId", _I), ("name", _S), ("taskType", _S),
    ("kind", _S), ("connectionId", _I), ("groupName", _S), ("opId", _I), ("count", _I), ("dataType", _S),
    ("collective", _S), ("launchOp", _S), ("launchNs", _I), ("launchTid", _I), ("step", _I),
])
BATCH_ROWS = 65536
_MEMCPY = re.compile(ASCEND_MEMCPY_TASK_TYPES)


def _launches(tables: set[str]) -> str:
    """SQL subquery: connectionId -> the PYTORCH_API op that holds it, with its start and thread."""
    if not {"CONNECTION_IDS", "PYTORCH_API"} <= tables:
        return "(select null as connectionId, null as op, null as ns, null as tid where 0)"
    return """(select ci.connectionId, max(s.value) as op, max(cast(p.startNs as integer)) as ns,
                      max(p.globalTid & 4294967295) as tid
               from CONNECTION_IDS ci join PYTORCH_API p on p.connectionId = ci.id
               left join STRING_IDS s on s.id = p.name
               group by ci.connectionId)"""


def device_rows(con: sqlite3.Connection, tables: set[str], problems: list[str]):
    """Yield Arrow batches of the db's device activity (SCHEMA); problems get a note per unreadable table."""
    strings = dict(con.execute("select id, value from STRING_IDS")) if "STRING_IDS" in tables else {}
    steps = con.execute("select id, startNs, endNs from STEP_TIME").fetchall() if "STEP_TIME" in tables else []
    data_types = (dict(con.execute("select id, name from ENUM_HCCL_DATA_TYPE"))
                  if "ENUM_HCCL_DATA_TYPE" in tables else {})
    launches = _launches(tables)

    def step_of(ns):
        if ns is None:
            return None
        return next((s for s, start, end in steps if start is not None and end is not None and start <= ns < end),
                    None)

    rows: list[dict] = []
    if "TASK" in tables:
        compute = ("left join COMPUTE_TASK_INFO c using (globalTaskId)" if "COMPUTE_TASK_INFO" in tables
                   else "left join (select null as globalTaskId, null as name where 0) c using (globalTaskId)")
        # A collective's tasks: those COMMUNICATION_TASK_INFO describes, and the task that
        # wraps it on its stream (launched with the op's own connectionId).
        skip = " and ".join(
            clause for table, clause in (
                ("COMMUNICATION_TASK_INFO",
                 "t.globalTaskId not in (select globalTaskId from COMMUNICATION_TASK_INFO)"),
                ("COMMUNICATION_OP", "t.connectionId not in (select connectionId from COMMUNICATION_OP"
                                     " where connectionId is not null)"),
            ) if table in tables)
        skip = f"where {skip}" if skip else ""
        sql = f"""select t.startNs, t.endNs, t.deviceId, t.streamId, c.name, t.taskType, c.globalTaskId is not null,
                         t.connectionId, l.op, l.ns, l.tid
                  from TASK t {compute} left join {launches} l on l.connectionId = t.connectionId
                  {skip} order by t.rowid"""
        try:
            for start, end, device, stream, name, task_type, is_kernel, conn, op, launch, tid in con.execute(sql):
                task_type = strings.get(task_type, None if task_type is None else str(task_type))
                kind = ("compute" if is_kernel else
                        "memcpy" if task_type and _MEMCPY.match(task_type.upper()) else "other")
                rows.append({"startNs": start, "endNs": end, "deviceId": device, "streamId": stream,
                             "name": strings.get(name, task_type) if is_kernel else task_type,
                             "taskType": task_type, "kind": kind, "connectionId": conn, "launchOp": op,
                             "launchNs": launch, "launchTid": tid, "step": step_of(launch or start)})
                if len(rows) >= BATCH_ROWS:
                    yield pa.RecordBatch.from_pylist(rows, SCHEMA)
                    rows = []
        except sqlite3.DatabaseError as exc:
            problems.append(f"TASK: unreadable ({exc}); device_ops keep the rows read before")
    if "COMMUNICATION_OP" in tables:
        device = "(select max(deviceId) from TASK)" if "TASK" in tables else "null"
        sql = f"""select o.startNs, o.endNs, o.opName, o.opType, o.connectionId, o.groupName, o.opId, o.count,
                         o.dataType, l.op, l.ns, l.tid, {device} as deviceId
                  from COMMUNICATION_OP o left join {launches} l on l.connectionId = o.connectionId
                  order by o.startNs, o.opId"""
        try:
            for (start, end, name, op_type, conn, group, op_id, count, data_type, op, launch, tid,
                 device) in con.execute(sql):
                name = strings.get(name, name)
                rows.append({"startNs": start, "endNs": end, "deviceId": device, "streamId": None,
                             "name": name, "taskType": strings.get(op_type, "HCCL"), "kind": "communication",
                             "connectionId": conn,
                             "groupName": strings.get(group, None if group is None else str(group)),
                             "opId": op_id, "count": None if count is None else int(count),
                             "dataType": data_types.get(data_type), "collective": collective_of(name),
                             "launchOp": op, "launchNs": launch, "launchTid": tid,
                             "step": step_of(launch or start)})
        except sqlite3.DatabaseError as exc:
            problems.append(f"COMMUNICATION_OP: unreadable ({exc}); device_ops keep the rows read before")
    if rows:
        yield pa.RecordBatch.from_pylist(rows, SCHEMA)
