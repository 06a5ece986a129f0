"""trace_view.json's device rows -> device_ops (a SELECT rlwh.readers.ascend_trace runs).

An Ascend text export describes one activity in several places: a kernel is a row of the
"Ascend Hardware" process (and of kernel_details.csv), a collective is a row of an HCCL
"Group <g> Communication" thread (and of communication.json), and its tasks are rows of
HCCL's "Plane" threads and again of "Ascend Hardware". So each activity is taken once,
from the trace: kernels and copies from Ascend Hardware, collectives from their op row;
the tasks a collective ran (the Ascend Hardware rows inside an HCCL op that are neither a
kernel nor a copy) are not repeated. The rows keep the trace's own field names
(Task Type, Physic Stream Id, data_type, count, connection_id); ingest/ascend_trace.sql
maps them to device_ops' columns.

The launch: torch_npu draws an async_npu flow from the enqueue on the CPU thread to the
device row ('f' at the row's pid, tid and ts); the launching op is the cpu_op on that
thread enclosing the flow's start. The step: the ProfilerStep#n cpu_op whose span holds
the launch (the row's start when it has none).
"""

from __future__ import annotations

from rlwh.readers.device_names import ascend_task_kind_sql, collective_sql

HARDWARE_PROCESS = "Ascend Hardware"
HCCL_PROCESS = "HCCL"


def device_ops_sql(ts_ns: str, end_ns: str) -> str:
    """The device rows of the `raw` view (the reader's kept events of one file or of a
    batch, `_file` telling which) as a SELECT, each row with its `_file`."""
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
            select r._file, r.name, r.{ts_ns} as start_ns, r.{end_ns} as end_ns, r.pid, r.tid, p.process, t.thread,
              r.task_type, try_cast(r.stream_id as bigint) as stream_id, try_cast(r.connection_id as bigint)
                as connection_id, r.data_type, try_cast(r.elem_count as bigint) as elem_count,
            from raw r join processes p using (_file, pid) left join threads t using (_file, pid, tid)
            where r.ph = 'X' and (
              (p.process = '{HARDWARE_PROCESS}' and r.task_type is not null)
              or (p.process = '{HCCL_PROCESS}' and t.thread like '%Communication')
            )
          ),
          collectives as (select _file, start_ns, end_ns from rows where process = '{HCCL_PROCESS}'),
          typed as (
            select *,
              case
                when process = '{HCCL_PROCESS}' then 'communication'
                else {ascend_task_kind_sql('task_type', 'name')}
              end as kind,
            from rows
          ),
          kept as (
            select * from typed t
            where t.kind <> 'other' or not exists (
              select 1 from collectives c
              where c._file = t._file and t.start_ns >= c.start_ns and t.end_ns <= c.end_ns)
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
            select k.*, fl.cpu_pid, fl.cpu_tid, fl.launch_ts_ns
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
            w.stream_id as "Physic Stream Id", w.connection_id, w.data_type, w.elem_count as "count",
            if(w.kind = 'communication', {collective_sql('w.name')}, null) as collective,
            try_cast(w.cpu_tid as bigint) as launch_tid, w.launch_ts_ns, w.launch_op,
            (select max(s.step) from steps s
             where s._file = w._file and coalesce(w.launch_ts_ns, w.start_ns) >= s.start_ns
               and coalesce(w.launch_ts_ns, w.start_ns) < s.end_ns
            ) as step,
          from with_op w"""
