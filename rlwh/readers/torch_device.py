"""A Kineto trace's device activity -> device_ops staging (called by rlwh.readers.torch_trace).

Kineto writes each GPU kernel, memcpy and memset once (cat kernel, gpu_memcpy,
gpu_memset; ROCm the same; PyTorch 1.8's Kernel / Memcpy / Memset are read as those), and
MTIA's device work as mtia_ccp_events. A kernel's args.correlation is the one of the
runtime call that launched it (cuda_runtime, cuda_driver, mtia_runtime); the launching op
is the cpu_op on that call's thread that encloses it. The step is the ProfilerStep#n
range holding the launch (the activity's start when unlinked). NCCL (and RCCL) kernels
are the communication; newer traces name their collective, process group, element count
and dtype in args. Rows keep Kineto's field names; ingest/torch_trace.sql maps them.
"""

from __future__ import annotations

import pyarrow as pa

from rlwh.readers.base import TableSink
from rlwh.readers.device_names import collective_sql, is_communication_sql

_I, _S = pa.int64(), pa.string()
DEVICE_SPILL = pa.schema([("cat", _S), ("name", _I), ("ts", _I), ("dur", _I), ("pid", _I), ("tid", _I),
                          ("device", _I), ("stream", _I), ("correlation", _I), ("collective_name", _S),
                          ("pg", _S), ("nelems", _I), ("dtype", _S), ("seq", _I)])
LAUNCH_SPILL = pa.schema([("correlation", _I), ("ts", _I), ("pid", _I), ("tid", _I)])
STAGED = pa.schema([("name", _S), ("ts_ns", _I), ("dur_ns", _I), ("cat", _S), ("pid", _I), ("device", _I),
                    ("stream", _I),
                    ("correlation", _I), ("Collective name", _S), ("Process Group Name", _S),
                    ("In msg nelems", _I), ("dtype", _S), ("Seq", _I), ("kind", _S), ("collective", _S),
                    ("launch_op", _S), ("launch_ts_ns", _I), ("launch_tid", _I), ("step", pa.int32())])


def copy_device_ops(con, sink: TableSink, spilled: int, base: int, names: list, dev: str, launch: str, ops: str,
                    ranges: str) -> None:
    """Resolve launches, launching ops and steps of the spilled device rows; write device_ops.
    `spilled`: how many device rows there are; with none the query (~40 ms to plan) is not asked."""
    if not spilled:
        sink.ensure("device_ops", STAGED)  # a CPU-only trace has none
        return
    con.register("_names", pa.table({"id": pa.array(range(len(names)), _I), "name": pa.array(names, _S)}))
    kind = f"""case cat
          when 'gpu_memcpy' then 'memcpy'
          when 'gpu_memset' then 'memset'
          when 'kernel' then
            if(collective_name is not null or coalesce({is_communication_sql('kernel')}, false),
               'communication', 'compute')
          else case when starts_with(kernel, 'dma') then 'memcpy'
                    when starts_with(kernel, 'event') then 'other' else 'compute' end
        end"""
    sql = f"""
        with launches as (
          select correlation, min(ts) as ts, min(pid) as pid, min(tid) as tid
          from read_parquet($launch) group by correlation
        ),
        steps as (
          select try_cast(substr(name, length('ProfilerStep#') + 1) as integer) as step, ts, "end"
          from read_parquet($ranges)
          where source = 'torch_annotation' and domain = 'default' and regexp_full_match(name, 'ProfilerStep#[0-9]+')
        ),
        cpu as (select pid, tid, ts, ts + coalesce(dur, 0) as "end", name from read_parquet($ops)),
        dev as (
          select d.*, n.name as kernel, l.ts as launch_ts, l.pid as launch_pid, l.tid as launch_tid
          from read_parquet($dev) d
          left join _names n on n.id = d.name
          left join launches l using (correlation)
        ),
        typed as (select *, {kind} as kind from dev),
        with_op as (
          select t.*, if(t.launch_ts <= o."end", n.name, null) as launch_op
          from typed t
          asof left join cpu o on t.launch_pid = o.pid and t.launch_tid = o.tid and t.launch_ts >= o.ts
          left join _names n on n.id = o.name
        )
        select
          kernel as name, ts + $base as ts_ns, dur as dur_ns, cat, pid, device, stream, correlation,
          collective_name as "Collective name", pg as "Process Group Name", nelems as "In msg nelems", dtype,
          seq as "Seq", kind,
          if(kind = 'communication', {collective_sql('kernel', 'collective_name')}, null) as collective,
          launch_op, launch_ts + $base as launch_ts_ns, launch_tid,
          (select max(s.step) from steps s
           where coalesce(w.launch_ts, w.ts) >= s.ts and coalesce(w.launch_ts, w.ts) < s."end") as step,
        from with_op w
    """
    params = {"base": base, "dev": dev, "launch": launch, "ops": ops, "ranges": ranges}
    for batch in con.sql(sql, params=params).to_arrow_reader(65536):
        sink.write("device_ops", pa.RecordBatch.from_arrays(
            [c.cast(t) for c, t in zip(batch.columns, STAGED.types)], schema=STAGED))
    con.unregister("_names")
    sink.ensure("device_ops", STAGED)  # a CPU-only trace has none
