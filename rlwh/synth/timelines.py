"""Small, realistic PyTorch traces, NVTX exports and GMM dumps for the demo and tests.

Companion of rlwh.synth (Ascend rank dirs): together they give `make demo` every format
rlwh reads, written without torch, nsys or an NPU. Deterministic for a seed.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from rlwh.synth.pt import write_int_tensor

BASE_NS = 1_790_857_026_000_000_000  # Kineto's baseTimeNanoseconds (epoch ns of ts 0)
_FRAMES = ["verl/trainer/main_ppo.py(212): fit", "verl/workers/fsdp_workers.py(611): update_actor",
           "verl/workers/actor/dp_actor.py(311): update_policy", "torch/nn/modules/module.py(1751): _call_impl",
           "transformers/models/qwen2/modeling_qwen2.py(254): forward"]
_OPS = ["aten::empty", "aten::linear", "aten::addmm", "aten::mul", "aten::add", "aten::softmax", "aten::zeros"]


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def write_torch_trace(path: Path, *, rank: int, world_size: int, steps: int = 3, seed: int = 0,
                      start_ns: int = 5_138_299_378_167_000, gz: bool = True, with_addr: bool = True,
                      base_ns: int = BASE_NS) -> Path:
    """A Kineto trace shaped like a real training step: python_function frames nested in
    time on the main thread, forward cpu_ops with autograd Sequence numbers, the backward
    pass on autograd's own thread (an `autograd::engine::evaluate_function: ...Backward0`
    node per forward op, Fwd thread id 1, no python frames), activations allocated in
    forward and freed on the backward thread, addresses reused by the caching allocator,
    a few blocks never freed and a few frees of memory allocated before the capture. Like
    Kineto, the file holds each thread's events together, not in time order.
    with_addr=False writes "[memory]" events without "Addr", as PyTorch 1.8 did. Times are
    start_ns after baseTimeNanoseconds = base_ns, as Kineto writes them."""
    rng = random.Random(seed * 1000 + rank)
    pid = tid = 4000 + rank
    bwd_tid = pid + 1
    main: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}}]
    autograd: list[dict] = []
    t = start_ns
    py_id = seq = 0
    alloc = _Allocator(pid, rank, with_addr)
    for addr in (0x7E0000000000, 0x7E0000100000):  # allocated before the capture began
        main.append(alloc.free_foreign(t + 500, addr, 1 << 20))
    for step in range(steps):
        step_start = t
        parent = None
        for depth, frame in enumerate(_FRAMES):
            py_id += 1
            main.append({"ph": "X", "cat": "python_function", "name": frame, "pid": pid, "tid": tid,
                         "ts": _us(t + depth), "dur": 0, "args": {"Python id": py_id, "Python parent id": parent}})
            parent = py_id
        frames = main[-len(_FRAMES):]
        t += 10_000
        forward_start, forward = t, []
        for _ in range(rng.randrange(20, 40)):
            op, dur = rng.choice(_OPS), rng.randrange(5_000, 40_000)
            seq += 1
            main.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": pid, "tid": tid, "ts": _us(t),
                         "dur": _us(dur), "args": {"External id": len(main), "Sequence number": seq,
                                                    "Fwd thread id": 0}})
            kept = []
            if op in ("aten::empty", "aten::zeros", "aten::addmm", "aten::linear") or rng.random() < 0.3:
                size = rng.choice([512, 4096, 1 << 20, 8 << 20, 64 << 20]) * 2
                main.append(alloc.allocate(tid, t + dur // 3, size))
                if rng.random() < 0.3:  # a temporary, freed inside the op
                    main.append(alloc.free(tid, t + dur - 100, alloc.last))
                elif rng.random() > 0.01:  # an activation, freed by the backward pass
                    kept.append(alloc.last)
            forward.append((op, seq, kept))
            t += dur + rng.randrange(1_000, 5_000)
        main.append({"ph": "X", "cat": "user_annotation", "name": "forward", "pid": pid, "tid": tid,
                     "ts": _us(forward_start), "dur": _us(t - forward_start), "args": {}})
        backward_start = t = t + 2_000
        for op, op_seq, kept in reversed(forward):
            dur = rng.randrange(8_000, 50_000)
            node = op.split("::")[-1].capitalize() + "Backward0"
            autograd.append({"ph": "X", "cat": "cpu_op", "name": f"autograd::engine::evaluate_function: {node}",
                             "pid": pid, "tid": bwd_tid, "ts": _us(t), "dur": _us(dur),
                             "args": {"Sequence number": op_seq, "Fwd thread id": 1}})
            if rng.random() < 0.6:  # the gradient, made by an op inside the node
                autograd.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": bwd_tid,
                                 "ts": _us(t + 1_000), "dur": _us(dur // 2), "args": {"Sequence number": -1,
                                                                                      "Fwd thread id": 0}})
                autograd.append(alloc.allocate(bwd_tid, t + 1_000 + dur // 4, rng.choice([4096, 1 << 20, 8 << 20])))
                grad = alloc.last
            else:
                grad = None
            for block in kept:  # events in time order, so each one's totals are right
                autograd.append(alloc.free(bwd_tid, t + dur - 200, block))
            if grad is not None:
                autograd.append(alloc.free(bwd_tid, t + dur - 50, grad))
            t += dur + rng.randrange(1_000, 3_000)
        main.append({"ph": "X", "cat": "user_annotation", "name": "backward", "pid": pid, "tid": tid,
                     "ts": _us(backward_start), "dur": _us(t - backward_start), "args": {}})
        main.append({"ph": "X", "cat": "python_function", "name": "<built-in method run_backward>", "pid": pid,
                     "tid": tid, "ts": _us(backward_start - 1_000), "dur": _us(t - backward_start + 1_500),
                     "args": {"Python id": py_id + 1, "Python parent id": parent}})
        py_id += 1
        for depth, event in enumerate(frames):  # nested in time, as a real thread's frames are
            event["dur"] = _us(t - step_start + 1_000 - 2 * depth)
        t += 20_000 + rank * 3_000  # rank 1 is a little slower
        main.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid,
                     "tid": tid, "ts": _us(step_start), "dur": _us(t - step_start), "args": {}})
    main.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
                 "ts": _us(start_ns), "dur": _us(t - start_ns), "args": {"Op count": 0}})
    trace = {
        "schemaVersion": 1, "deviceProperties": [], "with_stack": 1, "profile_memory": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
        "baseTimeNanoseconds": base_ns, "traceEvents": main + autograd, "displayTimeUnit": "ms",
    }
    data = json.dumps(trace).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_lagging_device_trace(path: Path, *, steps: int = 6, kernels_per_step: int = 8, seed: int = 0,
                               start_ns: int = 5_138_299_378_167_000, base_ns: int = BASE_NS) -> Path:
    """A Kineto trace of a GPU that runs more than a step behind its host: the CPU launches a
    step's kernels (cudaLaunchKernel, by correlation) in 4 ms, the device needs ~7 ms for them
    on two streams and starts 6 ms after the first launch, so each step's kernels run while the
    CPU is one or more steps ahead, and step n's last kernel on one stream still runs when step
    n + 1's first starts on the other. A copy per step; mid-step a kernel waits on both streams
    and the device idles a little."""
    rng = random.Random(seed)
    cpu, gpu = 7000, 0
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": cpu, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": gpu, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    stream_free = {7: start_ns + 6_000_000, 8: start_ns + 6_000_000}
    correlation = 0
    for step in range(steps):
        step_start = start_ns + step * 4_000_000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": cpu, "tid": cpu,
                       "ts": _us(step_start), "dur": _us(4_000_000), "args": {}})
        for i in range(kernels_per_step + 1):
            correlation += 1
            launch = step_start + 100_000 + i * 420_000
            is_copy = i == kernels_per_step
            runtime_call = "cudaMemcpyAsync" if is_copy else "cudaLaunchKernel"
            events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime_call,
                           "pid": cpu, "tid": cpu, "ts": _us(launch), "dur": _us(15_000),
                           "args": {"correlation": correlation}})
            stream = 7 if is_copy else 7 + i % 2
            start = max(launch + 5_000, stream_free[stream])
            if i == kernels_per_step // 2:  # a barrier: waits on both streams, then a little more: idle
                start = max(start, *stream_free.values()) + rng.randrange(50_000, 150_000)
                stream_free = {s: start for s in stream_free}
            dur = 150_000 if is_copy else rng.randrange(1_400_000, 2_000_000)
            stream_free[stream] = start + dur
            events.append({"ph": "X", "cat": "gpu_memcpy" if is_copy else "kernel",
                           "name": "Memcpy HtoD (Pageable -> Device)" if is_copy else f"gemm_{i}",
                           "pid": gpu, "tid": stream, "ts": _us(start), "dur": _us(dur),
                           "args": {"device": 0, "stream": stream, "correlation": correlation}})
    trace = {"schemaVersion": 1, "deviceProperties": [], "distributedInfo": {"backend": "nccl", "rank": 0,
                                                                              "world_size": 1},
             "baseTimeNanoseconds": base_ns, "traceEvents": events, "displayTimeUnit": "ms"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


class _Allocator:
    """A caching allocator's [memory] events: addresses reused after a free, running totals."""

    def __init__(self, pid: int, rank: int, with_addr: bool):
        self.pid, self.rank, self.with_addr = pid, rank, with_addr
        self.free_addrs: list[int] = []
        self.sizes: dict[int, int] = {}
        self.next_addr, self.allocated = 0x7F0000000000, 0
        self.last: tuple[int, int] = (0, 0)  # (addr, size) of the latest allocation

    def allocate(self, tid: int, ts_ns: int, size: int) -> dict:
        fits = [a for a in self.free_addrs if self.sizes.get(a, 0) >= size]
        addr = fits[0] if fits else self.next_addr
        if fits:
            self.free_addrs.remove(addr)
        else:
            self.next_addr += size
        self.sizes[addr] = max(size, self.sizes.get(addr, 0))
        self.allocated += size
        self.last = (addr, size)
        return self._event(tid, ts_ns, size, addr)

    def free(self, tid: int, ts_ns: int, block: tuple[int, int]) -> dict:
        addr, size = block
        self.allocated -= size
        self.free_addrs.append(addr)
        return self._event(tid, ts_ns, -size, addr)

    def free_foreign(self, ts_ns: int, addr: int, size: int) -> dict:
        """A free of a block allocated before the capture: no allocation precedes it."""
        return self._event(self.pid, ts_ns, -size, addr)

    def _event(self, tid: int, ts_ns: int, size: int, addr: int) -> dict:
        args = {"Total Reserved": max(self.allocated, 0) + (256 << 20), "Total Allocated": self.allocated,
                "Bytes": size, "Device Id": self.rank, "Device Type": 1}
        if self.with_addr:
            args["Addr"] = addr
        return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": self.pid, "tid": tid,
                "ts": _us(ts_ns), "args": args}


def write_nvtx_export(path: Path, *, rank: int, roles: dict[str, int], start_ns: int = 6_589_107_243_593_703,
                      seed: int = 0, utc_start_ns: int | None = None) -> Path:
    """An `nsys export --type jsonlines` file: one NVTX range per role, in order, as one
    colocated VeRL worker process records them; the rank in META_DATA_CAPTURE. Times are on
    the nsys session clock (start_ns); utc_start_ns, when given, is the session start in
    UTC as newer exports say it (TARGET_INFO_SESSION_START_TIME), which puts them on the epoch."""
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
    if utc_start_ns is not None:
        lines.append({"table": "TARGET_INFO_SESSION_START_TIME", "utcEpochNs": utc_start_ns})
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
