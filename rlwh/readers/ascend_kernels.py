"""kernel_details.csv (with communication.json beside it) -> device_ops staging.

An Ascend text export without trace_view.json still says what its device ran:
kernel_details.csv has a row per kernel (AI Core, AI Vector, MIX, AI CPU, DSA) and per
HCCL op (Accelerator Core "HCCL"), each with its profiler step, start and duration in µs
(exact to the ns); communication.json names each collective's HCCL group (its keys are
"<op name>@<group>", per step). Where the capture has trace_view.json, discovery reads
the device rows from there instead (rlwh.ingest.discover.one_device_source).

The CSV is read by the job's SQL (ingest/ascend_kernel_details_csv.sql, through
rlwh.readers.ascend_usage.read_csv, which falls back to a row-by-row read naming a bad
row); this module adds the kind, the collective and the group, and the job lands them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa

from rlwh.readers.ascend_usage import Column, Format, read_csv
from rlwh.readers.base import ReadOutcome, TableSink
from rlwh.readers.device_names import collective_sql, is_communication_sql
from rlwh.readers.reader_db import file_bytes, reader_db
from rlwh.sqltext import sql_literal

KERNEL_DETAILS = Format("kernel_details", (
    Column("step_id", ("Step Id",), "text"),
    Column("name", ("Name",), "text", required=True),
    Column("op_type", ("Type",), "text"),
    Column("accelerator_core", ("Accelerator Core",), "text"),
    Column("start_ns", ("Start Time",), "time", required=True),
    Column("duration_ns", ("Duration",), "time", required=True),
    Column("stream_id", ("Stream ID",), "text"),
))
GROUPS = pa.schema([("step", pa.int64()), ("name", pa.string()), ("group", pa.string())])
STAGED = pa.schema([("step_id", pa.int64()), ("name", pa.string()), ("start_ns", pa.int64()),
                    ("end_ns", pa.int64()), ("stream", pa.int64()), ("kind", pa.string()),
                    ("collective", pa.string()), ("group", pa.string()), ("accelerator_core", pa.string())])
COMMUNICATION_JSON = "communication.json"


def hccl_groups(path: Path) -> tuple[list[dict], str | None]:
    """communication.json's collectives and point-to-point ops: (rows of GROUPS, problem).
    Keys: {"step<n>": {"collective" | "p2p": {"<op>@<group>": {...}}}}; "Total Op Info"
    is a sum, no op."""
    try:
        with open(path, encoding="utf-8-sig") as handle:  # a BOM skipped, as the other readers skip one
            data = json.load(handle)
    except (OSError, UnicodeDecodeError) as exc:
        return [], f"{path}: cannot read it ({exc}): collectives have no group"
    except json.JSONDecodeError as exc:
        return [], f"{path}: not JSON at line {exc.lineno} column {exc.colno} ({exc.msg}): collectives have no group"
    except RecursionError:
        return [], f"{path}: JSON nested too deeply to read: collectives have no group"
    rows: list[dict] = []
    for step_key, kinds in (data.items() if isinstance(data, dict) else ()):
        digits = step_key[len("step"):] if isinstance(step_key, str) and step_key.startswith("step") else ""
        step = int(digits) if digits.isdigit() else None
        for ops in (kinds.values() if isinstance(kinds, dict) else ()):
            for key in (ops if isinstance(ops, dict) else ()):
                name, at, group = str(key).rpartition("@")
                if at:
                    rows.append({"step": step, "name": name, "group": group})
    return rows, None


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    outcome = read_csv(path, sink, KERNEL_DETAILS, context.get("memory_limit"))
    groups: list[dict] = []
    beside = path.with_name(COMMUNICATION_JSON)
    if beside.is_file():
        groups, problem = hccl_groups(beside)
        if problem:
            message = "; ".join(m for m in (outcome.message, problem) if m)
            outcome = ReadOutcome(status="partial", message=message, rank=outcome.rank)
    sink.finish(KERNEL_DETAILS.table)
    kernels = sink.root / KERNEL_DETAILS.table
    parts = sorted(kernels.glob("*.parquet")) if kernels.is_dir() else []
    _stage_device_ops(parts, pa.Table.from_pylist(groups, GROUPS), sink)
    shutil.rmtree(kernels, ignore_errors=True)  # staged as device_ops now
    return outcome


def _stage_device_ops(parts: list[Path], groups: pa.Table, sink: TableSink) -> None:
    """The kernels with their kind (an HCCL row is communication, every other row a
    kernel) and, for collectives, the collective and the group communication.json names."""
    if not parts:
        sink.ensure("device_ops", STAGED)
        return
    with reader_db(file_bytes(*parts)) as con:
        con.register("groups", groups)
        files = "[" + ", ".join(sql_literal(p) for p in parts) + "]"
        communication = (f"(upper(k.accelerator_core) = 'HCCL' "
                         f"or coalesce({is_communication_sql('k.name')}, false))")
        con.execute(f"""copy (
          with kernels as (
            select *, try_cast(step_id as bigint) as step, {communication} as is_communication,
            from read_parquet({files}) as k
          ),
          named as (
            -- a name once per step (and once per file when the file names no step)
            select step, name, any_value("group") as "group" from groups group by step, name
          )
          select
            k.step as step_id, k.name, k.start_ns, k.start_ns + coalesce(k.duration_ns, 0) as end_ns,
            try_cast(k.stream_id as bigint) as stream,
            case when k.is_communication then 'communication' else 'compute' end as kind,
            case when k.is_communication then {collective_sql('k.name')} end as collective,
            case when k.is_communication then
              coalesce(g."group", (select any_value(n."group") from named n where n.name = k.name))
            end as "group",
            nullif(k.accelerator_core, 'N/A') as accelerator_core,
          from kernels as k
          left join named as g on g.name = k.name and g.step = k.step
          order by k.source_row
        ) to {sql_literal(sink.parquet_path("device_ops"))} (format parquet)""")
