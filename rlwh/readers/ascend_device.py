"""trace_view.json's device rows -> device_ops (a SELECT rlwh.readers.ascend_trace runs).

An Ascend text export describes one activity in several places: a kernel is a row of the
"Ascend Hardware" process (and of kernel_details.csv), a collective is a row of an HCCL
"Group <g> Communication" thread (and of communication.json), and its tasks are rows of
HCCL's "Plane" threads and again of "Ascend Hardware". So each activity is taken once,
from the trace: kernels and copies from Ascend Hardware, collectives from their op row;
the tasks a collective ran are not repeated. The rows keep the trace's own field names
(Task Type, Physic Stream Id, data_type, count, connection_id); ingest/ascend_trace.sql
maps them to device_ops' columns.

A row's kind: its Task Type where that names a core (AI_CORE, MIX_AIV, ...) or a copy.
Older torch_npu (2024) types nearly every kernel "Other"; where the type names no core
("Other", empty, missing) kernel_details.csv beside the trace decides (a kernel it lists
at the same start is compute, any other task is not), else the task's name: HCCL's task
names (Notify Wait, Write Value, SDMA, Reduce_Inline, ...) are a collective's, the
runtime's (EVENT_RECORD, PROFILING_ENABLE, ...) its own, MEMCPY_ASYNC a copy, the rest
kernels. A collective's own tasks are the rows HCCL names so, and the rows inside its op's
span on a stream that runs such tasks; a kernel or an event on a compute stream beside a
collective is never one of them (DDP runs allreduce beside backward compute).

The launch: torch_npu draws an async_npu flow from the enqueue on the CPU thread to the
device row ('f' at the row's pid, tid and ts); the launching op is the cpu_op on that
thread enclosing the flow's start. The step: the ProfilerStep#n cpu_op whose span holds
the launch (the row's start when it has none).
"""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb

from rlwh.readers.base import trimmed_sql, us_text_to_ns_sql
from rlwh.readers.device_names import (
    ascend_is_hccl_task_sql,
    ascend_is_runtime_task_sql,
    ascend_is_untyped_sql,
    ascend_task_kind_sql,
    collective_sql,
    is_communication_sql,
)
from rlwh.sqltext import one_value, sql_ident, sql_literal

HARDWARE_PROCESS = "Ascend Hardware"
HCCL_PROCESS = "HCCL"
KERNEL_DETAILS = "kernel_details.csv"


def device_ops_sql(ts_ns: str, end_ns: str) -> str:
    """The device rows of the `raw` view (the reader's kept events of one file or of a
    batch, `_file` telling which) as a SELECT, each row with its `_file`; list_kernels has
    filled `listed_kernels` and `listings` first."""
    return f"""
          with processes as (
            select distinct _file, pid, meta_name as process from raw where ph = 'M' and name = 'process_name'
          ),
          threads as (
            select distinct _file, pid, tid, meta_name as thread from raw where ph = 'M' and name = 'thread_name'
          ),
          steps as (
            select _file, try_cast(substr(name, length('ProfilerStep#') + 1) as integer) as step,
              {ts_ns} as start_ns, {end_ns} as end_ns
            from raw where cat = 'cpu_op' and regexp_full_match(name, 'ProfilerStep#[0-9]+')
          ),
          rows as (
            -- An Ascend Hardware thread is a stream: its tid is the stream's id (the old
            -- format's "Stream Id" is not kept).
            select r._file, r.name, r.{ts_ns} as start_ns, r.{end_ns} as end_ns, r.pid, r.tid, p.process, t.thread,
              r.task_type, try_cast(r.stream_id as bigint) as stream_id, try_cast(r.connection_id as bigint)
                as connection_id, r.data_type, try_cast(r.elem_count as bigint) as elem_count,
              coalesce(try_cast(r.stream_id as bigint), try_cast(r.tid as bigint)) as stream,
              p.process = '{HARDWARE_PROCESS}' and {ascend_is_hccl_task_sql('r.name')} as is_hccl_task,
            from raw r join processes p using (_file, pid) left join threads t using (_file, pid, tid)
            where r.ph = 'X' and (
              p.process = '{HARDWARE_PROCESS}'
              or (p.process = '{HCCL_PROCESS}' and t.thread like '%Communication')
            )
          ),
          collectives as (select _file, start_ns, end_ns from rows where process = '{HCCL_PROCESS}'),
          hccl_streams as (select distinct _file, stream from rows where is_hccl_task),
          named as (
            select *,
              case
                when process = '{HCCL_PROCESS}' then 'communication'
                when {ascend_task_kind_sql('task_type', 'name')} <> 'other'
                  then {ascend_task_kind_sql('task_type', 'name')}
                when is_hccl_task or {ascend_is_runtime_task_sql('name')}
                  or not {ascend_is_untyped_sql('task_type')} then 'other'
                when (_file, start_ns) in (select (_file, start_ns) from listed_kernels) then 'compute'
                when _file in (select _file from listings) then 'other'  -- kernel_details.csv lists every kernel
                else null  -- a kernel, unless it is a collective's task (below)
              end as named_kind,
            from rows
          ),
          typed as (
            select *,
              coalesce(named_kind, 'other') = 'other' and (is_hccl_task or (
                (_file, stream) in (select (_file, stream) from hccl_streams)
                and exists (select 1 from collectives c
                            where c._file = n._file and n.start_ns >= c.start_ns and n.end_ns <= c.end_ns)
              )) as is_collective_task,
            from named n
          ),
          kept as (
            select * replace (coalesce(named_kind, 'compute') as named_kind)
            from typed where not is_collective_task
          ),
          flows as (
            select f._file, f.pid, f.tid, f.ts_ns, s.pid as cpu_pid, s.tid as cpu_tid, s.launch_ts_ns
            from raw f
            join (select _file, flow_id, pid, tid, ts_ns as launch_ts_ns from raw
                  where cat = 'async_npu' and ph = 's') s
              using (_file, flow_id)
            where f.cat = 'async_npu' and f.ph = 'f'
          ),
          launched as (
            select k.* rename (named_kind as kind), fl.cpu_pid, fl.cpu_tid, fl.launch_ts_ns
            from kept k left join flows fl
              on k._file = fl._file and k.pid = fl.pid and k.tid = fl.tid and k.start_ns = fl.ts_ns
          ),
          cpu as (
            select _file, pid, tid, name, {ts_ns} as ts_ns, {end_ns} as end_ns from raw where cat = 'cpu_op'
          ),
          with_op as (
            select l.*, if(l.launch_ts_ns <= o.end_ns, o.name, null) as launch_op
            from launched l asof left join cpu o
              on l._file = o._file and l.cpu_pid = o.pid and l.cpu_tid = o.tid and l.launch_ts_ns >= o.ts_ns
          )
          select
            w._file, w.name, w.start_ns, w.end_ns, w.process, w.thread, w.kind, w.task_type as "Task Type",
            if(w.process = '{HARDWARE_PROCESS}', w.stream, w.stream_id) as "Physic Stream Id",
            w.connection_id, w.data_type, w.elem_count as "count",
            if(w.kind = 'communication', {collective_sql('w.name')}, null) as collective,
            try_cast(w.cpu_tid as bigint) as launch_tid, w.launch_ts_ns, w.launch_op,
            (select max(s.step) from steps s
             where s._file = w._file and coalesce(w.launch_ts_ns, w.start_ns) >= s.start_ns
               and coalesce(w.launch_ts_ns, w.start_ns) < s.end_ns
            ) as step,
          from with_op w"""


def list_kernels(con: duckdb.DuckDBPyConnection, traces: list[Path]) -> None:
    """Fill temp table listed_kernels (_file, start_ns) with the start of every kernel the
    kernel_details.csv beside each trace of `raw` lists (each row but the HCCL ops), for the
    traces with a hardware task whose type names no core; `listings` (_file) names the
    traces whose file was read. Its starts are the trace's, to the ns."""
    con.execute("create or replace temp table listed_kernels (_file integer, start_ns bigint)")
    con.execute("create or replace temp table listings (_file integer)")
    for i in _with_untyped_tasks(con):
        kernel_details = traces[i].with_name(KERNEL_DETAILS)
        columns = _kernel_details_columns(kernel_details) if kernel_details.is_file() else None
        if columns is None:
            continue
        start, name, core, op_type = columns
        ns = us_text_to_ns_sql(trimmed_sql(sql_ident(start)), strict=False)
        try:
            con.execute(f"""insert into listed_kernels
                select {i}, {ns} from read_csv({sql_literal(kernel_details)}, header = true, all_varchar = true)
                where not ({_hccl_op_sql(name, core, op_type)})""")
        except duckdb.Error:
            con.execute("delete from listed_kernels where _file = ?", [i])
            continue  # unreadable: the task names decide
        if one_value(con.execute("select count(*) from listed_kernels where _file = ?", [i])):
            con.execute("insert into listings values (?)", [i])


def _hccl_op_sql(name: str | None, core: str | None, op_type: str | None) -> str:
    """SQL over kernel_details.csv: true for an HCCL op's row (Accelerator Core HCCL, or an
    hcom_* name or type), which is a collective, not a kernel."""
    tests = [f"upper(trim(coalesce({sql_ident(core)}, ''))) = 'HCCL'"] if core else []
    tests += [f"coalesce({is_communication_sql(sql_ident(c))}, false)" for c in (name, op_type) if c]
    return " or ".join(tests) or "false"


def _with_untyped_tasks(con: duckdb.DuckDBPyConnection) -> list[int]:
    """The files of `raw` with a hardware task whose type names no core."""
    return [r[0] for r in con.execute(f"""select distinct r._file from raw r
        where r.ph = 'X' and {ascend_is_untyped_sql('r.task_type')} and (r._file, r.pid) in (
          select (_file, pid) from raw where ph = 'M' and name = 'process_name' and meta_name = '{HARDWARE_PROCESS}')
        order by 1""").fetchall()]


def _kernel_details_columns(path: Path) -> tuple[str, str | None, str | None, str | None] | None:
    """kernel_details.csv's header names for the start time, Name, Accelerator Core and Type
    (the start's unit suffix varies: "Start Time(us)"); None without a start column."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), [])
    except (OSError, UnicodeDecodeError):
        return None
    start = next((h for h in header if h.startswith("Start Time")), None)
    if start is None:
        return None
    def named(wanted: str) -> str | None:
        return wanted if wanted in header else None
    return start, named("Name"), named("Accelerator Core"), named("Type")
