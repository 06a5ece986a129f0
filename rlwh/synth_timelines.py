"""Small, realistic PyTorch traces, NVTX exports and GMM dumps for the demo and tests.

Companion of rlwh.synth (Ascend rank dirs): together they give `make demo` every format
rlwh reads, written without torch, nsys or an NPU. Deterministic for a seed.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from rlwh.synth_pt import write_int_tensor

BASE_NS = 1_790_857_026_000_000_000  # Kineto's baseTimeNanoseconds (epoch ns of ts 0)
_FRAMES = ["verl/trainer/main_ppo.py(212): fit", "verl/workers/fsdp_workers.py(611): update_actor",
           "verl/workers/actor/dp_actor.py(311): update_policy", "torch/nn/modules/module.py(1751): _call_impl",
           "transformers/models/qwen2/modeling_qwen2.py(254): forward"]
_OPS = ["aten::empty", "aten::linear", "aten::addmm", "aten::mul", "aten::add", "aten::softmax", "aten::zeros"]


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def write_torch_trace(path: Path, *, rank: int, world_size: int, steps: int = 3, seed: int = 0,
                      start_ns: int = 5_138_299_378_167_000, gz: bool = True) -> Path:
    """A Kineto trace: python_function nesting, cpu_ops, annotations and [memory] events."""
    rng = random.Random(seed * 1000 + rank)
    pid = tid = 4000 + rank
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}}]
    t = start_ns
    py_id = 0
    addr_free: list[int] = []
    live: dict[int, int] = {}
    next_addr, allocated = 0x7F0000000000, 0
    for step in range(steps):
        step_start = t
        parent = None
        for depth, frame in enumerate(_FRAMES):
            py_id += 1
            events.append({"ph": "X", "cat": "python_function", "name": frame, "pid": pid, "tid": tid,
                           "ts": _us(t + depth), "dur": 0, "args": {"Python id": py_id, "Python parent id": parent}})
            parent = py_id
        frames = events[-len(_FRAMES):]
        t += 10_000
        for phase in ("forward", "backward"):
            phase_start = t
            for _ in range(rng.randrange(20, 40)):
                op = rng.choice(_OPS)
                dur = rng.randrange(5_000, 40_000)
                events.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": pid, "tid": tid, "ts": _us(t),
                               "dur": _us(dur), "args": {"External id": len(events)}})
                if op in ("aten::empty", "aten::zeros", "aten::addmm", "aten::linear") or rng.random() < 0.3:
                    size = rng.choice([512, 4096, 1 << 20, 8 << 20, 64 << 20]) * (2 if phase == "forward" else 1)
                    addr = addr_free.pop() if addr_free and rng.random() < 0.5 else next_addr
                    next_addr += size
                    live[addr] = size
                    allocated += size
                    events.append(_memory(pid, tid, t + dur // 3, size, addr, allocated, rank))
                if live and (phase == "backward" or rng.random() < 0.3):
                    addr = rng.choice(sorted(live))
                    size = live.pop(addr)
                    allocated -= size
                    addr_free.append(addr)
                    events.append(_memory(pid, tid, t + dur - 100, -size, addr, allocated, rank))
                t += dur + rng.randrange(1_000, 5_000)
            events.append({"ph": "X", "cat": "user_annotation", "name": phase, "pid": pid, "tid": tid,
                           "ts": _us(phase_start), "dur": _us(t - phase_start), "args": {}})
        for depth, frame in enumerate(frames):  # nested in time, as a real thread's frames are
            frame["dur"] = _us(t - step_start + 1_000 - 2 * depth)
        t += 20_000 + rank * 3_000  # rank 1 is a little slower
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid,
                       "tid": tid, "ts": _us(step_start), "dur": _us(t - step_start), "args": {}})
    trace = {
        "schemaVersion": 1, "deviceProperties": [], "with_stack": 1, "profile_memory": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
        "baseTimeNanoseconds": BASE_NS, "traceEvents": events, "displayTimeUnit": "ms",
    }
    data = json.dumps(trace).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _memory(pid, tid, ts_ns, size, addr, allocated, rank) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid, "tid": tid,
            "ts": _us(ts_ns), "args": {"Total Reserved": max(allocated, 0) + (256 << 20), "Total Allocated": allocated,
                                       "Bytes": size, "Device Id": rank, "Device Type": 1, "Addr": addr}}


def write_nvtx_export(path: Path, *, rank: int, roles: dict[str, int], start_ns: int = 6_589_107_243_593_703,
                      seed: int = 0) -> Path:
    """An `nsys export --type jsonlines` file: one NVTX range per role, in order, as one
    colocated VeRL worker process records them; the rank in META_DATA_CAPTURE."""
    rng = random.Random(seed * 1000 + rank)
    lines = [{"id": 100 + i, "table": "StringIds", "value": role} for i, role in enumerate(roles)]
    offset = 20_000_000
    total = 0
    for i, (role, mean_ms) in enumerate(roles.items()):
        dur = int(mean_ms * 1e6 * (1 + 0.02 * rng.random() + 0.12 * (rank == 1 and role.startswith("update"))))
        lines.append({"color": 4294951115, "domainId": 0, "end": offset + dur, "eventType": 59,
                      "globalTid": (1 << 48) | (7000 + rank) << 24 | (7000 + rank), "rangeId": i + 1,
                      "start": offset, "table": "NVTX_EVENTS", "textId": 100 + i})
        offset += dur + 5_000_000
        total = offset
    lines.insert(len(roles), {"duration": total, "globalVid": 281474976710656, "startTime": start_ns,
                              "stopTime": start_ns + total, "table": "ANALYSIS_DETAILS"})
    lines.append({"name": "PROCESS_0:ENVIRONMENT_VARIABLE", "table": "META_DATA_CAPTURE", "value": f'RANK="{rank}"'})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    return path


def write_gmm_dumps(root: Path, *, steps: int = 2, roles=("actor_update", "actor_compute_log_prob"), ranks: int = 2,
                    experts: int = 16, layers: int = 4, ops_per_layer: int = 3, seed: int = 0) -> list[Path]:
    """group_list.pt dumps: per layer one routing shared by its grouped matmuls; training
    roles replay the layers backwards after the forward pass, as RL-Insight expects."""
    written = []
    for step in range(1, steps + 1):
        for role in roles:
            for rank in range(ranks):
                rng = random.Random(f"{seed}-{step}-{role}-{rank}")
                routing = []
                for layer in range(layers):
                    hot = rng.randrange(experts)
                    load = [rng.randrange(100, 400) for _ in range(experts)]
                    load[hot] += 800 + 300 * layer
                    routing.append(load)
                order = [layer for layer in range(layers) for _ in range(ops_per_layer)]
                if role.endswith("_update"):
                    order += [layer for layer in reversed(range(layers)) for _ in range(ops_per_layer)]
                folder = root / f"step_{step}" / role / f"rank{rank}" / "dump_tensor_data"
                for op, layer in enumerate(order):
                    path = folder / f"NPU.npu_grouped_matmul.{op}.forward.kwargs.group_list.pt"
                    folder.mkdir(parents=True, exist_ok=True)
                    write_int_tensor(path, routing[layer])
                    written.append(path)
    return written
