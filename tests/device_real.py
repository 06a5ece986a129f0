"""Real multi-rank captures for the device tests, ingested once per test run (shared by the
pytest-xdist workers, conftest._once_for_all_workers; read them, never write), and what
their raw files say, read with the standard library only (json, gzip, csv, sqlite3,
decimal): the oracle the device views are checked against, never rlwh code."""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from collections.abc import Mapping
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from conftest import FIXTURES, _once_for_all_workers, copy_fixture

ALEXNET = "real/ascend/msinsight-alexnet-level1"
HTA_PAIR = ("real/kineto/hta/timeline_analysis/sampled_rank-0.json.gz",
            "real/kineto/hta/trace_filter/sampled_rank-1.json.gz")
RUNS = ("alexnet_text", "alexnet_db", "hta_pair")

_built: dict[str, Path] = {}


def warehouse(tmp_path_factory) -> Path:
    """One warehouse holding three runs: alexnet_text, alexnet_db and hta_pair (two NCCL ranks)."""
    if "db" not in _built:
        _built["db"] = _once_for_all_workers(tmp_path_factory, "device-real", _make_warehouse)
    return _built["db"]


def _make_warehouse(root: Path) -> Path:
    from rlwh.config import Config
    from rlwh.ingest.runner import ingest

    db = root / "w.duckdb"
    config = Config(db_path=db, workers=1)
    for export in ("text", "db"):
        profile = copy_fixture(f"{ALEXNET}/{export}", root / f"alexnet_{export}")
        ingest(profile, config, run=f"alexnet_{export}")
    pair = root / "hta_pair"
    for rank, relative in enumerate(HTA_PAIR):
        (pair / f"rank{rank}").mkdir(parents=True)
        copy_fixture(relative, pair / f"rank{rank}")
    ingest(pair, config, run="hta_pair")
    return db


def ns(us) -> int:
    """Microseconds (a JSON number or decimal text) as ns, rounded half up like the profiler's text."""
    return int((Decimal(str(us).strip()) * 1000).to_integral_value(rounding="ROUND_HALF_UP"))


@lru_cache(maxsize=None)
def ascend_trace(rank: int) -> list[dict]:
    path = FIXTURES / ALEXNET / f"text/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    return json.loads(path.read_text())


def _names(events, kind):
    return {(e["pid"], e.get("tid") if kind == "thread_name" else None): e["args"]["name"]
            for e in events if e.get("ph") == "M" and e.get("name") == kind}


def text_collectives(rank: int) -> list[tuple[str, int, int]]:
    """(name, start_ns, end_ns) of the HCCL op rows ("Group <g> Communication" threads)."""
    events = ascend_trace(rank)
    processes = {pid: name for (pid, _), name in _names(events, "process_name").items()}
    threads = _names(events, "thread_name")
    out = []
    for e in events:
        if e.get("ph") == "X" and processes.get(e["pid"]) == "HCCL" and \
                threads.get((e["pid"], e["tid"]), "").endswith("Communication"):
            out.append((e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    return sorted(out, key=lambda r: r[1])


def text_kernels(rank: int) -> list[tuple[str, int, int]]:
    """(name, start_ns, end_ns) of the Ascend Hardware rows that are kernels: the task types
    of kernel_details.csv's rows (AI_*, MIX_*, and DSA_SQE for DSAGenBitMask)."""
    events = ascend_trace(rank)
    processes = {pid: name for (pid, _), name in _names(events, "process_name").items()}
    return sorted((e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
                  if e.get("ph") == "X" and processes.get(e["pid"]) == "Ascend Hardware"
                  and str((e.get("args") or {}).get("Task Type", "")).startswith(("AI_", "MIX_", "DSA")))


def kernel_details(rank: int) -> list[dict]:
    """kernel_details.csv's rows (text export), with start_ns and end_ns exact from the µs text."""
    path = FIXTURES / ALEXNET / f"text/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["start_ns"] = ns(r["Start Time(us)"])
        r["end_ns"] = r["start_ns"] + ns(r["Duration(us)"])
    return rows


def communication_groups(rank: int) -> dict[str, str]:
    """communication.json: op name -> the HCCL group after the '@' of its key."""
    path = FIXTURES / ALEXNET / f"text/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json"
    data = json.loads(path.read_text())
    return {key.rsplit("@", 1)[0]: key.rsplit("@", 1)[1]
            for kinds in data.values() for ops in kinds.values() for key in ops if "@" in key}


def step_trace_time(export_dir: str, rank: int) -> dict:
    """step_trace_time.csv's row (text export) as ns per column, exact from the decimal text."""
    path = FIXTURES / ALEXNET / f"{export_dir}/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    with open(path, newline="") as f:
        row = next(csv.DictReader(f))
    return {k: (int(v) if k == "Step" else ns(v)) for k, v in row.items()}


def db_path(rank: int, name: str = "") -> Path:
    name = name or f"ascend_pytorch_profiler_{rank}.db"
    return FIXTURES / ALEXNET / f"db/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/{name}"


def db_query(rank: int, sql: str, name: str = "") -> list[tuple]:
    con = sqlite3.connect(f"file:{db_path(rank, name)}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def db_collectives(rank: int) -> list[tuple[str, int, int]]:
    return db_query(rank, "select s.value, o.startNs, o.endNs from COMMUNICATION_OP o"
                          " join STRING_IDS s on s.id = o.opName order by o.startNs")


@lru_cache(maxsize=None)
def kineto(rank: int) -> dict:
    with gzip.open(FIXTURES / HTA_PAIR[rank]) as f:
        return json.load(f)


# The kineto_* helpers below read the raw trace once per rank (lru_cache, immutable results):
# tests call kineto_step_of once per device event, which walked the whole trace each time.
@lru_cache(maxsize=None)
def kineto_device_events(rank: int) -> tuple[dict, ...]:
    return tuple(e for e in kineto(rank)["traceEvents"]
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


def kineto_nccl(rank: int) -> list[tuple[str, int, int]]:
    return sorted((e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in kineto_device_events(rank)
                  if e["cat"] == "kernel" and e["name"].startswith("nccl"))


@lru_cache(maxsize=None)
def kineto_steps(rank: int) -> tuple[tuple[int, int, int], ...]:
    """(n, start_ns, end_ns) of the ProfilerStep#n annotations."""
    return tuple(sorted((int(e["name"].split("#")[1]), ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
                  for e in kineto(rank)["traceEvents"]
                  if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")))


@lru_cache(maxsize=None)
def kineto_launch_ts(rank: int) -> Mapping[int, int]:
    """correlation -> ts_ns of the cuda_runtime call that launched it."""
    return MappingProxyType({e["args"]["correlation"]: ns(e["ts"]) for e in kineto(rank)["traceEvents"]
                             if e.get("cat") == "cuda_runtime" and "correlation" in (e.get("args") or {})})


def kineto_step_of(rank: int, event: dict) -> int | None:
    at = kineto_launch_ts(rank).get((event.get("args") or {}).get("correlation"), ns(event["ts"]))
    return next((n for n, start, end in kineto_steps(rank) if start <= at < end), None)


def arrival_order(per_rank: dict[int, list[tuple[str, int, int]]]) -> list[dict]:
    """Instances matched by (name, k-th occurrence): each rank's arrival and duration, the last
    rank and the waiting: the last arrival minus the rank's, never more than the rank's own
    collective lasted (capped: the ones where the arrivals asked for more); mismatched: the ranks
    left it further apart than its largest wait and its shortest stay."""
    by_key: dict[tuple, dict[int, tuple[int, int]]] = {}
    for rank, rows in per_rank.items():
        seen: dict[str, int] = {}
        for name, start, end in sorted(rows, key=lambda r: r[1]):
            seen[name] = seen.get(name, 0) + 1
            by_key.setdefault((name, seen[name]), {})[rank] = (start, end)
    out = []
    for (name, k), times in by_key.items():
        arrivals = {r: s for r, (s, _) in times.items()}
        durations = {r: e - s for r, (s, e) in times.items()}
        last = max(arrivals.values())
        last_rank = min(r for r, a in arrivals.items() if a == last)
        ends = [e for _, e in times.values()]
        mismatched = max(ends) - min(ends) > max(last - min(arrivals.values()), min(durations.values()))
        out.append({"name": name, "k": k, "arrivals": arrivals, "durations": durations, "last_rank": last_rank,
                    "mismatched": mismatched,
                    "waits": {r: min(last - a, durations[r]) for r, a in arrivals.items()},
                    "capped": {r for r, a in arrivals.items() if last - a > durations[r]}})
    return sorted(out, key=lambda i: min(i["arrivals"].values()))


# ---------------------------------------------------------------- any Kineto trace, on the device's clock
KINETO_TRACES = {  # run name -> fixture: the real GPU traces the device-clock tests read
    "ns_resolution": "real/kineto/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "amd": "real/kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tb_resnet": "real/kineto/kineto-tb-samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "index_resolver": "real/kineto/hta/df_index_resolver/df_index_resolver.json.gz",
    "trace_diff": "real/kineto/hta/trace_diff/control/control.json.gz",
    "trace_diff_test": "real/kineto/hta/trace_diff/test/test.json.gz",  # steps overlap on the device
    "mtia": "real/kineto/hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
    "sampled_rank0": "real/kineto/hta/timeline_analysis/sampled_rank-0.json.gz",
    "sampled_rank1": "real/kineto/hta/trace_filter/sampled_rank-1.json.gz",
}
_OLD_CATEGORIES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime"}


def _trace(relative: str) -> dict:
    path = FIXTURES / relative
    with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as f:
        return json.load(f, parse_float=Decimal)  # ns-resolution ts do not fit a float


@lru_cache(maxsize=None)
def _facts(relative: str) -> tuple[tuple[dict, ...], tuple[tuple[str, int, int], ...], int]:
    """What the tests ask of a trace, from one parse: device_activity, user_annotations and
    base_ns. The parsed JSON is not kept: the traces of KINETO_TRACES are 1.3 million Python
    objects, which every later full GC of the test process scanned (0.6 s each)."""
    trace = _trace(relative)
    events = trace["traceEvents"]
    annotations = tuple((e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
                        if e.get("ph") == "X" and e.get("cat") == "user_annotation")
    return _device_activity(events), annotations, int(trace.get("baseTimeNanoseconds") or 0)


def base_ns(relative: str) -> int:
    """Epoch ns of the trace's ts 0: Kineto's baseTimeNanoseconds, 0 where its ts are epoch µs."""
    return _facts(relative)[2]


def user_annotations(relative: str) -> tuple[tuple[str, int, int], ...]:
    """(name, start_ns, end_ns) of each CPU user annotation (ProfilerStep#n included), trace time."""
    return _facts(relative)[1]


def _cat(e: dict) -> str:
    return _OLD_CATEGORIES.get(e.get("cat", ""), e.get("cat", ""))


def device_activity(relative: str) -> tuple[dict, ...]:
    """Every kernel, copy and set (and MTIA device event) as {device, stream, kind, s, e, launch, step},
    in ns; launch is the ts of the runtime call of the same correlation, step the ProfilerStep#n
    whose range holds the launch (the start when unlinked)."""
    return _facts(relative)[0]


def _device_activity(events: list[dict]) -> tuple[dict, ...]:
    launches = {}
    for e in events:
        if _cat(e) in ("cuda_runtime", "cuda_driver", "mtia_runtime") and "correlation" in (e.get("args") or {}):
            launches[e["args"]["correlation"]] = ns(e["ts"])
    steps = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), int(e["name"].split("#")[1])) for e in events
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") == "user_annotation" and e["name"].split("#")[1].isdigit())
    out = []
    for e in events:
        cat = _cat(e)
        if e.get("ph") != "X" or cat not in ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events"):
            continue
        args = e.get("args") or {}
        s = ns(e["ts"])
        launch = launches.get(args.get("correlation"))
        at = s if launch is None else launch
        step = max((n for start, end, n in steps if start <= at < end), default=None)
        kind = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}.get(cat, "compute")
        if cat == "kernel" and str(e["name"]).lower().startswith(("nccl", "rccl")):
            kind = "communication"
        if cat == "mtia_ccp_events":  # MTIA's command processor: DMA transfers, events, executions
            kind = "memcpy" if str(e["name"]).startswith("dma") else \
                "other" if str(e["name"]).startswith("event") else "compute"
        out.append({"device": args.get("device", e.get("pid")), "stream": args.get("stream"), "kind": kind,
                    "s": s, "e": s + ns(e.get("dur", 0)), "launch": launch, "step": step})
    return tuple(out)


def union(intervals) -> int:
    """Length of a union of (start, end) intervals."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def kineto_warehouse(tmp_path_factory) -> Path:
    """One warehouse holding each of KINETO_TRACES as its own run (one rank each)."""
    if "kineto" not in _built:
        _built["kineto"] = _once_for_all_workers(tmp_path_factory, "kineto-real", _make_kineto_warehouse)
    return _built["kineto"]


def _make_kineto_warehouse(root: Path) -> Path:
    from rlwh.config import Config
    from rlwh.ingest.runner import ingest

    db = root / "w.duckdb"
    for run, relative in KINETO_TRACES.items():
        (root / run / "rank0").mkdir(parents=True)
        copy_fixture(relative, root / run / "rank0")
        ingest(root / run, Config(db_path=db, workers=1), run=run)
    return db


def step_windows(acts) -> dict[tuple, list[tuple[int, int]]]:
    """(step, device) -> the pieces of the device's time that are the step's window: each step's
    span (its own activity's first start to last end), the device's time cut where each step's
    first activity starts (an instant goes to the step begun most recently, while some step's
    span begun so far covers it); step None gets the parts of its span no step's window holds."""
    by_device: dict = {}
    for a in acts:
        if a["e"] > a["s"]:
            lo, hi = by_device.setdefault(a["device"], {}).get(a["step"], (a["s"], a["e"]))
            by_device[a["device"]][a["step"]] = (min(lo, a["s"]), max(hi, a["e"]))
    out: dict[tuple, list[tuple[int, int]]] = {}
    for device, spans in by_device.items():
        ordered = sorted((first, step, last) for step, (first, last) in spans.items() if step is not None)
        reach, cut = None, []
        for i, (first, step, last) in enumerate(ordered):
            reach = last if reach is None else max(reach, last)
            end = min(reach, ordered[i + 1][0]) if i + 1 < len(ordered) else reach
            if end > first:
                out.setdefault((step, device), []).append((first, end))
                cut.append((first, end))
        if None in spans:
            lo, hi = spans[None]
            for start, end in cut:
                if start > lo:
                    out.setdefault((None, device), []).append((lo, min(start, hi)))
                lo = max(lo, end)
            if hi > lo:
                out.setdefault((None, device), []).append((lo, hi))
            out[(None, device)] = [(x, y) for x, y in out.get((None, device), []) if y > x]
            if not out[(None, device)]:
                del out[(None, device)]
    return out


def _cut(intervals, pieces) -> list[tuple[int, int]]:
    return [(max(s, a), min(e, b)) for s, e in intervals for a, b in pieces if s < b and e > a]


def device_clock_steps(relative: str) -> dict[tuple, tuple]:
    """(step, device) -> (window, compute, communication, overlapped, exposed, memcpy, idle) ns:
    the device's activity, whichever step launched it, in each step's window (step_windows)."""
    acts = [a for a in device_activity(relative) if a["e"] > a["s"]]
    out = {}
    for (step, device), pieces in step_windows(acts).items():
        mine = [a for a in acts if a["device"] == device]
        window = sum(b - a for a, b in pieces)
        sets = {k: _cut([(a["s"], a["e"]) for a in mine if a["kind"] == k], pieces)
                for k in ("compute", "communication", "memcpy")}
        compute, comm = union(sets["compute"]), union(sets["communication"])
        overlapped = compute + comm - union(sets["compute"] + sets["communication"])
        out[(step, device)] = (window, compute, comm, overlapped, comm - overlapped, union(sets["memcpy"]),
                               window - union(_cut([(a["s"], a["e"]) for a in mine], pieces)))
    return out
