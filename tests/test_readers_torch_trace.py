"""rlwh.readers.torch_trace on real PyTorch traces and on generated ones."""

import gzip
import importlib.util
import json
import random
import re
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rlwh.errors import SourceError
from rlwh.readers import torch_trace
from rlwh.readers.base import TableSink, stack_id
from rlwh.readers.kineto_events import NotTyped

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data"  # the real files (tests/data/SOURCES)
REAL = FIXTURES / "torch_profile"
RL_INSIGHT = FIXTURES / "rl-insight-samples" / "torch_data" / "torch_profile"
BASE = 1790857026000000000

_spec = importlib.util.spec_from_file_location("gen_torch_trace", ROOT / "bench" / "gen_torch_trace.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def run_reader(path: Path, tmp_path: Path, context: dict | None = None):
    """Read `path` into a fresh TableSink; return the outcome and {table: rows}."""
    out = tmp_path / f"out-{path.name}"
    shutil.rmtree(out, ignore_errors=True)
    sink = TableSink(out)
    outcome = torch_trace.read(path, sink, context or {})
    sink.close()
    tables = {name: pq.read_table(parts).to_pylist() for name, parts in sink.tables().items()}
    return outcome, tables


def stacks_by_op(tables) -> dict:
    """(name, ts_ns, tid) -> sorted stack texts of the cpu_ops there (None: no stack)."""
    stacks = {r["stack_id"]: r["stack"] for r in tables.get("call_stacks", [])}
    out: dict = {}
    for r in tables.get("cpu_ops", []):
        out.setdefault((r["name"], r["ts_ns"], r["tid"]), []).append(stacks.get(r["stack_id"]))
    return {k: sorted(v, key=str) for k, v in out.items()}


def copy_in(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "in" / src.parent.name / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    return dst


def kineto_json(obj) -> str:
    """JSON with ts/dur as bare decimal numbers, as Kineto writes them (given as text here)."""
    return re.sub(r'"(ts|dur)": "(-?[0-9.]+)"', r'"\1": \2', json.dumps(obj, default=str))


def write_trace(path: Path, events: list, head: dict | None = None, tail: dict | None = None,
                compress: bool = False) -> bytes:
    """A Kineto-shaped file: `head` keys, traceEvents, then `tail` keys. Returns its text."""
    head = {"schemaVersion": 1, "baseTimeNanoseconds": BASE} if head is None else head
    parts = [json.dumps(k) + ": " + json.dumps(v) for k, v in head.items()]
    body = ",\n".join("  " + kineto_json(e) for e in events)
    parts.append('"traceEvents": [\n' + body + "\n]")
    parts += [json.dumps(k) + ": " + json.dumps(v) for k, v in (tail or {}).items()]
    text = ("{\n" + ",\n".join(parts) + "\n}\n").encode()
    path.write_bytes(gzip.compress(text) if compress else text)
    return text


def X(cat, name, ts, dur, tid=10, pid=1, **args):
    """A complete event; ts/dur are µs text as Kineto writes them."""
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = {k.replace("_", " "): v for k, v in args.items()}
    return ev


def py(name, ts, dur, pyid=None, parent=None, tid=10):
    ev = X("python_function", name, ts, dur, tid=tid)
    if pyid is not None:
        ev["args"] = {"Python parent id": parent, "Python id": pyid}
    return ev


def mem(ts, nbytes, addr, total, tid=10, device_type=0, device_id=-1):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": tid,
            "ts": ts, "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes,
                               "Device Id": device_id, "Device Type": device_type, "Addr": addr}}


def dec_json(text):
    return json.loads(text, parse_float=Decimal)


# --- a brute-force oracle: whole file in memory, every enclosure checked --------------

def reference(path: Path):
    """Expected stacks per op and op per memory event, the slow and obvious way."""
    raw = path.read_bytes()
    doc = dec_json(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    base = doc.get("baseTimeNanoseconds", 0)
    ns = lambda v: int(Decimal(v) * 1000)  # noqa: E731
    events = doc["traceEvents"]
    frames = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["tid"], e.get("args", {}).get("Python id"),
               e.get("args", {}).get("Python parent id"), e["name"])
              for e in events if e.get("cat") == "python_function"]
    by_id = {f[3]: f for f in frames if f[3] is not None}
    ops = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["tid"], e["name"])
           for e in events if e.get("cat") == "cpu_op"]
    # The frames in one order, for every op (it depends on no op).
    order = sorted(frames, key=lambda f: (f[2], f[0], f[0] - f[1], f[3] if f[3] is not None else -1))
    rank = {id(f): i for i, f in enumerate(order)}
    parents: dict = {}  # a frame's parent depends on the frame alone: found once per frame

    def parent(f):
        if id(f) not in parents:
            named = by_id.get(f[4])
            outer = [g for g in frames if g[2] == f[2] and rank[id(g)] < rank[id(f)]
                     and g[0] <= f[0] and g[1] >= f[1]]
            between = [g for g in outer if named is not None and rank[id(g)] > rank.get(id(named), 1 << 60)]
            if named in outer and all(g[1] == f[0] or (g[0], g[1]) == (f[0], f[1]) for g in between):
                parents[id(f)] = named
            else:
                parents[id(f)] = max(outer, key=lambda g: rank[id(g)]) if outer else None
        return parents[id(f)]

    stacks: dict = {}
    for start, _, tid, name in ops:
        around = [f for f in frames if f[2] == tid and f[0] <= start <= f[1]]
        text = None
        if around:
            # Innermost frame first. A frame's parent: the innermost frame that encloses it
            # in time; its "Python parent id" frame only when every frame between them merely
            # touches it (ends as it starts, or has its very span).
            f = max(around, key=lambda f: (f[0], f[0] - f[1], f[3] if f[3] is not None else -1))
            chain = []
            while f is not None:
                chain.append(f[5])
                f = parent(f)
            text = "\n".join(chain)
        stacks.setdefault((name, base + start, tid), []).append(text)
    memory = []
    for i, m in enumerate(e for e in events if e.get("name") == "[memory]"):
        t = ns(m["ts"])
        around = [o for o in ops if o[2] == m["tid"] and o[0] <= t <= o[1]]
        inner = max(around, key=lambda o: (o[0], o[0] - o[1])) if around else None
        memory.append((i, base + t, inner and inner[3]))
    return {k: sorted(v, key=str) for k, v in stacks.items()}, memory


def memory_summary(tables):
    rows = sorted(tables.get("torch_memory_events", []), key=lambda r: r["event_index"])
    return [(r["event_index"], r["ts_ns"], r["op_name"]) for r in rows]


# --- real traces ---------------------------------------------------------------------

def test_real_trace_values(tmp_path):
    path = copy_in(REAL / "actor_update" / "prof_rank-0.pt.trace.json.gz", tmp_path)
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.status == "ok" and outcome.message is None
    rank = outcome.rank
    assert (rank["rank_id"], rank["world_size"], rank["device"]) == (0, 2, "cpu")
    assert rank["capture_started_ns"] == BASE + 5138299378167396
    assert rank["versions"] == {"schemaVersion": 1}
    assert rank["profiler_config"] == {"with_stack": 1, "profile_memory": 1, "record_shapes": 1}
    assert rank["parallel_groups"][0]["ranks"] == [0, 1]
    assert rank["metadata"]["host_name"] == "vm"
    assert rank["metadata"]["trace_id"] == "58017C56BEE54B28AF9EF6E541C736B5"
    json.dumps(rank)  # JSON-able

    assert len(tables["cpu_ops"]) == 578
    op = min((r for r in tables["cpu_ops"] if r["name"] == "aten::empty"), key=lambda r: r["ts_ns"])
    assert (op["ts_ns"], op["dur_ns"], op["pid"], op["tid"]) == (BASE + 5138299381082921, 16838, 4189, 4189)
    stacks = {r["stack_id"]: r for r in tables["call_stacks"]}
    assert len(stacks) == len(tables["call_stacks"])  # each stack once
    stack = stacks[op["stack_id"]]
    frames = stack["stack"].split("\n")
    # Innermost frame first, as Ascend writes stacks.
    assert frames[0] == "<built-in method empty of type object at 0x7fab7e4cea40>" == stack["top_frame"]
    assert frames[:3] == ["<built-in method empty of type object at 0x7fab7e4cea40>",
                          "torch/nn/modules/linear.py(96): __init__", "make_torch_fixtures.py(24): _work"]
    assert frames[-1] == "<string>(1): <module>"
    assert stack["depth"] == len(frames) == 10
    assert stack["stack_id"] == stack_id(stack["stack"])

    first = min(tables["torch_memory_events"], key=lambda r: r["event_index"])
    assert first == {"event_index": 0, "ts_ns": BASE + 5138299381094911, "bytes": 131072,
                     "addr": 94412369700736, "total_allocated_bytes": 131072, "total_reserved_bytes": 0,
                     "device_type": 0, "device_id": -1, "tid": 4189, "op_name": "aten::empty",
                     "stack_id": op["stack_id"], "op_ts_ns": op["ts_ns"]}
    assert len(tables["torch_memory_events"]) == 316

    ranges = {(r["name"], r["start_ns"]): r for r in tables["ranges"]}
    step = ranges[("actor_update_step_0", BASE + 5138299384669635)]
    assert step == {"source": "torch_annotation", "domain": "default", "name": "actor_update_step_0",
                    "start_ns": BASE + 5138299384669635, "end_ns": BASE + 5138299384669635 + 32591342,
                    "pid": 4189, "tid": 4189, "thread": None}
    # The profiler's own window: the capture's span, beyond the first and last op.
    window, = [r for r in tables["ranges"] if r["source"] == "profiler"]
    assert window["name"].startswith("PyTorch Profiler")
    assert window["start_ns"] <= min(r["ts_ns"] for r in tables["cpu_ops"])
    assert window["end_ns"] >= max(r["ts_ns"] + (r["dur_ns"] or 0) for r in tables["cpu_ops"])
    # What the events cover, beside it: the span of every other timed event.
    covered, = [r for r in tables["ranges"] if r["source"] == "recorded"]
    assert covered["start_ns"] <= min(r["ts_ns"] for r in tables["cpu_ops"])
    assert len(ranges) == 10


@pytest.mark.parametrize("name", [
    # The oracle (reference()) takes seconds on this trace: make test's, not make check's.
    pytest.param("actor_update/prof_rank-1.pt.trace.json.gz", marks=pytest.mark.slow),
    "actor_compute_log_prob/prof_rank-0.pt.trace.json.gz"])
def test_real_traces_match_oracle(tmp_path, name):
    path = copy_in(REAL / name, tmp_path)
    outcome, tables = run_reader(path, tmp_path)
    expected_stacks, expected_memory = reference(path)
    assert stacks_by_op(tables) == expected_stacks
    assert memory_summary(tables) == expected_memory
    assert outcome.rank["rank_id"] == int(name.split("rank-")[1][0])


def test_rl_insight_gpu_traces(tmp_path):
    path = copy_in(RL_INSIGHT / "actor_update" / "prof_rank-1_031904.json.gz", tmp_path)
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.status == "ok"
    rank = outcome.rank
    assert (rank["rank_id"], rank["world_size"], rank["device"]) == (1, 2, "cuda:0")
    assert rank["capture_started_ns"] == 1767189312000000000 + 4541015315462515
    assert rank["versions"] == {"schemaVersion": 1, "cupti_version": 26, "cuda_runtime_version": 12080,
                                "cuda_driver_version": 12080}
    assert [g["pg_desc"] for g in rank["parallel_groups"]][:2] == ["default_pg", "mesh_dp"]
    # A cuda_runtime call and markers only: no rows but the span those events cover (device_ops staged, empty).
    assert {name for name, rows in tables.items() if rows} == {"ranges"}
    assert [r["source"] for r in tables["ranges"]] == ["recorded"]

    rollout = copy_in(RL_INSIGHT / "agent_loop_rollout_replica_0"
                      / "huawei_372640.1771730370159969000.pt.trace.json.gz", tmp_path)
    outcome, tables = run_reader(rollout, tmp_path)
    assert outcome.rank["rank_id"] == 1
    assert outcome.rank["versions"]["nccl_version"] == "2.27.3"
    assert outcome.rank["device"] == "cuda"  # two GPUs visible, none used by an event
    assert tables["cpu_ops"] == [{"name": "aten::lift_fresh", "ts_ns": 1767189312000000000 + 4540970808621755,
                                  "dur_ns": 1987, "pid": 372640, "tid": 372640, "stack_id": None,
                                  "seq_no": None, "fwd_tid": None}]
    assert "call_stacks" not in tables
    assert [r["source"] for r in tables["ranges"]] == ["profiler", "recorded"]  # its window, its events' span


# --- generated traces ----------------------------------------------------------------

@pytest.mark.parametrize("compress, meta_after", [(False, False), (True, True)])
def test_generated_matches_oracle(tmp_path, compress, meta_after):
    path = tmp_path / "prof_rank-0.pt.trace.json"
    gen.gen_torch_trace(path, 400_000, seed=5, compress=compress, meta_after=meta_after)
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.status == "ok"
    assert outcome.rank["device"] == "cuda:0"
    assert outcome.rank["capture_started_ns"] == BASE + gen.T0_NS
    expected_stacks, expected_memory = reference(path)
    assert stacks_by_op(tables) == expected_stacks
    assert memory_summary(tables) == expected_memory
    assert any(v != [None] for v in expected_stacks.values())


def test_gzip_and_plain_give_the_same_rows(tmp_path):
    plain, packed = tmp_path / "a.pt.trace.json", tmp_path / "b.bin"  # gzip found by magic
    gen.gen_torch_trace(plain, 200_000, seed=9)
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    _, a = run_reader(plain, tmp_path, {"rank_id": 0})
    _, b = run_reader(packed, tmp_path, {"rank_id": 0})
    assert a == b and a["cpu_ops"]


def test_shuffled_events(tmp_path):
    """Nothing depends on the order of traceEvents: python frames may come first or last."""
    path = tmp_path / "prof_rank-2.json"
    gen.gen_torch_trace(path, 150_000, seed=2)
    doc = dec_json(path.read_bytes())
    random.Random(0).shuffle(doc["traceEvents"])
    path.write_text(kineto_json(doc))
    outcome, tables = run_reader(path, tmp_path)
    expected_stacks, expected_memory = reference(path)
    assert stacks_by_op(tables) == expected_stacks
    assert memory_summary(tables) == expected_memory


def test_rank_from_file_name_then_error(tmp_path):
    path = tmp_path / "prof_rank-3_031904.json"
    gen.gen_torch_trace(path, 20_000, rank=None)
    outcome, _ = run_reader(path, tmp_path)
    assert outcome.rank["rank_id"] == 3 and outcome.rank["world_size"] is None
    nameless = tmp_path / "trace.json"
    shutil.copy(path, nameless)
    with pytest.raises(SourceError, match="trace.json.*rank"):
        run_reader(nameless, tmp_path)


def test_no_trace_events_is_an_error(tmp_path):
    path = tmp_path / "prof_rank-0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0}}))
    with pytest.raises(SourceError, match="no traceEvents"):
        run_reader(path, tmp_path)
    path.write_text('{"schemaVersion": 1, "distributedInfo": {"ra')
    with pytest.raises(SourceError, match="no traceEvents"):
        run_reader(path, tmp_path)


def test_empty_trace_events(tmp_path):
    path = tmp_path / "prof_rank-0.json"
    write_trace(path, [], tail={"distributedInfo": {"rank": 4, "world_size": 8}, "traceName": "x"})
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.status == "ok" and not any(tables.values())  # device_ops staged, empty
    assert outcome.rank["rank_id"] == 4 and outcome.rank["capture_started_ns"] is None


def stack_trace_events():
    """Frames with ids that time alone would nest wrongly, ties, and ids-free frames."""
    return [
        X("cpu_op", "aten::linear", "100.000", "50.000"),       # ops come before their frames
        X("cpu_op", "aten::addmm", "100.000", "20.000"),        # same start, shorter: inner
        X("cpu_op", "aten::add", "200.000", "0.000"),
        X("cpu_op", "aten::outside", "500.000", "1.000"),
        X("cpu_op", "aten::other_thread", "100.000", "5.000", tid=11),
        mem("110.000", 512, 7, 512),                            # in addmm (innermost)
        mem("130.000", -512, 7, 0),                             # in linear only
        mem("150.000", 1024, 8, 1024),                          # at linear's end: inside
        mem("150.001", -4096, 99, -3072),                       # a free with no allocation; no op
        mem("160.000", 1024, 7, -2048),                         # address 7 reused
        mem("100.000", 64, 5, 64, tid=12),                      # a thread with no ops
        py("main.py(1): <module>", "0.000", "400.000", 1, None),
        py("main.py(5): step", "50.000", "150.000", 2, 1),
        py("model.py(20): forward", "100.000", "100.000", 4, 2),   # ends with step
        py("<built-in method addmm>", "100.000", "30.000", 5, 4),  # starts with forward
        py("main.py(9): log", "200.000", "0.000", 3, 1),        # at step's end: its id says sibling
        X("python_function", "worker.py(3): run", "0.000", "200.000", tid=11),  # no ids: time
        X("python_function", "worker.py(8): body", "100.000", "10.000", tid=11),
    ]


def test_stacks_follow_python_ids_and_ties(tmp_path):
    path = tmp_path / "prof_rank-0.json"
    write_trace(path, stack_trace_events())
    outcome, tables = run_reader(path, tmp_path)
    got = stacks_by_op(tables)
    ns = lambda us: BASE + int(Decimal(us) * 1000)  # noqa: E731
    forward = "<built-in method addmm>\nmodel.py(20): forward\nmain.py(5): step\nmain.py(1): <module>"
    assert got == {
        ("aten::linear", ns("100"), 10): [forward],
        ("aten::addmm", ns("100"), 10): [forward],
        ("aten::add", ns("200"), 10): ["main.py(9): log\nmain.py(1): <module>"],
        ("aten::outside", ns("500"), 10): [None],
        ("aten::other_thread", ns("100"), 11): ["worker.py(8): body\nworker.py(3): run"],
    }
    assert got == reference(path)[0]
    rows = sorted(tables["torch_memory_events"], key=lambda r: r["event_index"])
    assert [(r["event_index"], r["bytes"], r["addr"], r["total_allocated_bytes"], r["tid"], r["op_name"])
            for r in rows] == [
        (0, 512, 7, 512, 10, "aten::addmm"),
        (1, -512, 7, 0, 10, "aten::linear"),
        (2, 1024, 8, 1024, 10, "aten::linear"),
        (3, -4096, 99, -3072, 10, None),
        (4, 1024, 7, -2048, 10, None),
        (5, 64, 5, 64, 12, None),
    ]
    assert memory_summary(tables) == reference(path)[1]
    by_name = {r["name"]: r["stack_id"] for r in tables["cpu_ops"]}
    assert rows[0]["stack_id"] == by_name["aten::addmm"] and rows[3]["stack_id"] is None
    assert rows[5]["ts_ns"] == ns("100") and rows[5]["device_type"] == 0 and rows[5]["device_id"] == -1
    assert len(tables["call_stacks"]) == 3
    assert outcome.rank["capture_started_ns"] == BASE


def test_times_exact_and_ids_coerced(tmp_path):
    path = tmp_path / "prof_rank-0.json"
    events = [
        X("cpu_op", "a", "9007199254740.993", "0.001", pid="7", tid="8"),   # not exact as a double
        X("cpu_op", "b", "12", "3", pid="Spans", tid="PyTorch Profiler"),
        X("user_annotation", "ProfilerStep#1", "9007199254740.993", "1.5"),
        X("gpu_user_annotation", "ProfilerStep#1", "9007199254741", "1", pid=0, tid=7),
        X("Trace", "PyTorch Profiler (0)", "1.000", "5", pid="Spans", tid="PyTorch Profiler"),
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 10, "args": {"name": "x"}},  # no ts
    ]
    write_trace(path, events)
    outcome, tables = run_reader(path, tmp_path)
    ops = {r["name"]: r for r in tables["cpu_ops"]}
    assert (ops["a"]["ts_ns"], ops["a"]["dur_ns"], ops["a"]["pid"], ops["a"]["tid"]) == (
        BASE + 9007199254740993, 1, 7, 8)
    assert (ops["b"]["ts_ns"], ops["b"]["dur_ns"], ops["b"]["pid"], ops["b"]["tid"]) == (BASE + 12000, 3000, None, None)
    ranges = {r["domain"]: r for r in tables["ranges"] if r["source"] == "torch_annotation"}
    assert (ranges["default"]["start_ns"], ranges["default"]["end_ns"]) == (
        BASE + 9007199254740993, BASE + 9007199254742493)
    assert (ranges["gpu"]["pid"], ranges["gpu"]["tid"], ranges["gpu"]["start_ns"]) == (0, 7, BASE + 9007199254741000)
    assert outcome.rank["capture_started_ns"] == BASE + 1000


def test_no_base_time(tmp_path):
    path = tmp_path / "prof_rank-0.json"
    write_trace(path, [X("cpu_op", "a", "1.5", "1")], head={"schemaVersion": 1})
    _, tables = run_reader(path, tmp_path)
    assert tables["cpu_ops"][0]["ts_ns"] == 1500 and tables["cpu_ops"][0]["dur_ns"] == 1000


def test_device_from_gpu_events(tmp_path):
    path = tmp_path / "prof_rank-0.json"
    props = [{"id": 0, "name": "GPU"}, {"id": 1, "name": "GPU"}]
    events = [mem("1.000", 512, 1, 512, device_type=1, device_id=1),
              X("kernel", "gemm", "2.000", "1.000", pid=1, tid=7, device=1)]
    write_trace(path, events, head={"baseTimeNanoseconds": BASE, "deviceProperties": props})
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.rank["device"] == "cuda:1"
    assert [(r["device_type"], r["device_id"]) for r in tables["torch_memory_events"]] == [(1, 1)]


@pytest.mark.parametrize("streaming", [False, True])
def test_keys_after_trace_events(tmp_path, monkeypatch, streaming):
    """Keys after traceEvents come from the typed pass's last piece, or from the streaming
    pass as it comes to them."""
    if streaming:
        def refuse(path, spill, *rest):
            raise NotTyped("this test reads with the streaming parser")
        monkeypatch.setattr(torch_trace, "_scan_typed", refuse)
    path = tmp_path / "trace.json"
    groups = [{"pg_name": str(i), "ranks": list(range(64))} for i in range(40)]
    write_trace(path, op_events(5), head={"schemaVersion": 1},
                tail={"distributedInfo": {"rank": 6, "world_size": 64, "pg_config": groups},
                      "baseTimeNanoseconds": BASE})
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.rank["rank_id"] == 6 and len(outcome.rank["parallel_groups"]) == 40
    assert min(r["ts_ns"] for r in tables["cpu_ops"]) == BASE + 1_000_000


def test_only_table_folders_are_left_in_the_sink(tmp_path):
    path = copy_in(REAL / "actor_update" / "prof_rank-0.pt.trace.json.gz", tmp_path)
    run_reader(path, tmp_path)
    out = tmp_path / f"out-{path.name}"
    assert sorted(p.name for p in out.iterdir()) == ["call_stacks", "cpu_ops", "device_ops", "ranges",
                                                     "torch_memory_events"]


# --- damaged files -------------------------------------------------------------------

def op_events(n):
    return [X("cpu_op", f"op{i}", f"{1000 + i * 10}.000", "5.000") for i in range(n)]


def test_truncated_plain_file_keeps_complete_events(tmp_path):
    path = tmp_path / "prof_rank-0.json"
    text = write_trace(path, op_events(50), tail={"distributedInfo": {"rank": 1}})
    cut = text.index(b'"op20"') + 3  # inside event 20: 20 complete before it
    path.write_bytes(text[:cut])
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.status == "partial"
    assert str(path) in outcome.message and f"uncompressed byte {cut}" in outcome.message
    assert sorted(r["name"] for r in tables["cpu_ops"]) == sorted(f"op{i}" for i in range(20))
    assert outcome.rank["rank_id"] == 0  # the trailer is lost: rank from the file name


def test_truncated_gzip_keeps_a_prefix(tmp_path):
    full = tmp_path / "full.json"
    text = write_trace(full, op_events(3000))
    packed = gzip.compress(text)
    path = tmp_path / "prof_rank-0.json.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    outcome, tables = run_reader(path, tmp_path)
    assert outcome.status == "partial"
    assert "gzip" in outcome.message and "uncompressed byte" in outcome.message and str(path) in outcome.message
    names = {r["name"] for r in tables["cpu_ops"]}
    assert 0 < len(names) < 3000 and names == {f"op{i}" for i in range(len(names))}


def test_malformed_event_is_skipped(tmp_path):
    """Skipped, and the message names the first one: its place in traceEvents and its byte."""
    path = tmp_path / "prof_rank-0.json"
    events = op_events(3) + [X("cpu_op", "bad", "BAD", "2"), X("cpu_op", "bad2", "BAD", "2")]
    text = write_trace(path, events).decode().replace('"ts": "BAD"', '"ts": [1]')
    path.write_text(text)
    outcome, tables = run_reader(path, tmp_path)
    byte = text.index('{"ph": "X", "cat": "cpu_op", "name": "bad"')
    assert outcome.status == "partial"
    assert f"skipped 2 malformed events (the first: element 4 of traceEvents, at uncompressed byte {byte})" \
        in outcome.message, outcome.message
    assert len(tables["cpu_ops"]) == 3


def test_time_nesting_wins_where_python_parent_ids_contradict_it(tmp_path):
    """Activation checkpointing re-runs forward code during backward: the re-run frames say
    "Python parent id" of a forward frame that ended long ago. The op's stack is what the
    thread did then: the frames enclosing it in time, innermost first."""
    path = tmp_path / "prof_rank-0.json"
    write_trace(path, [
        py("train.py(10): step", "0.000", "1000.000", 1, None),
        py("model.py(20): forward", "10.000", "100.000", 2, 1),          # forward, ends at 110
        py("train.py(30): backward", "200.000", "700.000", 3, 1),
        py("checkpoint.py(40): recompute", "300.000", "100.000", 4, 3),
        py("model.py(21): block", "310.000", "50.000", 5, 2),            # its id says: inside forward
        X("cpu_op", "aten::mm", "320.000", "10.000"),
    ])
    outcome, tables = run_reader(path, tmp_path)
    got = stacks_by_op(tables)
    assert got == {("aten::mm", BASE + 320_000, 10): [
        "model.py(21): block\ncheckpoint.py(40): recompute\ntrain.py(30): backward\ntrain.py(10): step"]}
    assert got == reference(path)[0]


def test_time_nesting_wins_over_an_enclosing_named_parent(tmp_path):
    """A recomputed frame whose "Python parent id" names an open frame that encloses it,
    with a frame between them in time (a real checkpointed MI300X trace lost
    `torchvision/models/resnet.py(266): _forward_impl` this way): every frame that encloses
    the op in time stays in its stack."""
    path = tmp_path / "prof_rank-0.json"
    write_trace(path, [
        py("train.py(10): step", "0.000", "1000.000", 1, None),
        py("checkpoint.py(30): checkpoint", "100.000", "800.000", 2, 1),
        py("resnet.py(266): _forward_impl", "200.000", "500.000", 3, 2),
        py("resnet.py(285): forward", "250.000", "100.000", 4, 2),  # its id names checkpoint
        X("cpu_op", "aten::conv2d", "260.000", "10.000"),
        py("resnet.py(90): block", "400.000", "50.000", 5, 3),
        py("resnet.py(91): relu", "450.000", "10.000", 6, 3),  # touches block as it ends: a sibling by id
        X("cpu_op", "aten::relu", "455.000", "5.000"),
    ])
    outcome, tables = run_reader(path, tmp_path)
    got = stacks_by_op(tables)
    tail = "resnet.py(266): _forward_impl\ncheckpoint.py(30): checkpoint\ntrain.py(10): step"
    assert got == {("aten::conv2d", BASE + 260_000, 10): [f"resnet.py(285): forward\n{tail}"],
                   ("aten::relu", BASE + 455_000, 10): [f"resnet.py(91): relu\n{tail}"]}
    assert got == reference(path)[0]
