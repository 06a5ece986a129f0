"""Deterministic generator of realistic Ascend profiler rank dirs.

The demo, the tests and the benchmarks need profiles of any size, from a few kB to
several GB, in the exact on-disk format torch_npu writes (see the real sample in
../shared/fixtures/rl-insight-samples/memory_data). Real profiles are large and private,
so this module fabricates them from a seed:

- operator_memory.csv: time cells quoted and ending in a TAB, never-released rows with
  empty release/duration cells, exact time ties, running totals that agree with the
  live sum of the rows plus a base (weights loaded before profiling started), live
  memory rising through forward, peaking, and falling in backward, step after step.
- trace_view.json: a JSON array whose cpu_op X events have "ts" as a string with three
  decimals and, for `stacked_fraction` of them, a "Call stack" drawn from a pool of
  `n_stacks` distinct python stacks (innermost frame first, frames joined by ";\\r\\n");
  plus Kernel / HostToDevice events and process/thread M events (so cpu_ops are a
  subset), mstx ranges and marks, and the "Overlap Analysis" process (pid > 2**31) whose
  rows are derived from the device ops written (unions of kernels and collectives, gaps).

Files are written step by step (one training step, <= 20 k ops, at a time), so memory
stays bounded whatever the size. Each step is drawn from the seeded RNG in a fixed
order, then its text is built column-wise by pyarrow.compute (no Python code per row)
on two writer threads, one per file: ~150 MB/s on a 2-core machine.

Size calibration (see trace_bytes_per_op): ~635 B of compact trace per cpu_op with 27 %
stacked (1.6 M ops ~ 1.0 GB), ~203 B per CSV row (1.5 M rows ~ 305 MB).
"""

from __future__ import annotations

import json
import random
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as _pc

from rlwh.arrow_start import skip_pandas_probe

skip_pandas_probe()  # the arrays below are this process's first: without it, pyarrow imports pandas (0.26 s)

# The header of a real operator_memory.csv, byte for byte.
CSV_HEADER = (
    "Name,Size(KB),Allocation Time(us),Release Time(us),Active Release Time(us),"
    "Duration(us),Active Duration(us),Allocation Total Allocated(MB),"
    "Allocation Total Reserved(MB),Allocation Total Active(MB),"
    "Release Total Allocated(MB),Release Total Reserved(MB),Release Total Active(MB),"
    "Stream Ptr,Device Type\n"
)

# (op name, relative frequency, allocations it makes relative to an average op).
FORWARD_OPS = [
    ("aten::empty", 8, 1.5), ("aten::empty_strided", 6, 1.5), ("aten::zeros", 2, 1.2),
    ("aten::add", 6, 1.0), ("aten::mul", 6, 1.0), ("aten::matmul", 4, 1.0),
    ("aten::mm", 4, 1.0), ("aten::linear", 4, 1.0), ("aten::addmm", 2, 1.0),
    ("aten::bmm", 1, 1.0), ("aten::clone", 2, 1.0), ("aten::copy_", 4, 0.2),
    ("aten::to", 3, 0.5), ("aten::_to_copy", 3, 1.0), ("aten::cat", 2, 1.0),
    ("aten::view", 5, 0.0), ("aten::reshape", 3, 0.1), ("aten::transpose", 3, 0.0),
    ("aten::contiguous", 2, 0.8), ("aten::embedding", 1, 1.0), ("aten::pow", 1, 1.0),
    ("aten::mean", 1, 1.0), ("aten::rsqrt", 1, 1.0), ("aten::sigmoid", 1, 1.0),
    ("aten::silu", 1, 1.0), ("aten::softmax", 1, 1.0), ("aten::log_softmax", 1, 1.0),
    ("aten::gather", 1, 1.0), ("aten::sum", 1, 1.0), ("aten::div", 1, 1.0),
    ("aten::sub", 1, 1.0), ("aten::neg", 1, 1.0), ("aten::exp", 1, 1.0),
    ("aten::where", 1, 1.0), ("aten::masked_fill", 1, 1.0),
    ("npu::_npu_dtype_cast", 2, 1.0), ("npu::npu_fusion_attention", 1, 2.0),
    ("npu::npu_rms_norm", 1, 1.5), ("npu::npu_rotary_mul", 1, 1.0),
    ("npu::npu_swiglu", 1, 1.0),
]
BACKWARD_OPS = [
    ("aten::mm", 6, 1.0), ("aten::empty", 6, 1.5), ("aten::add", 4, 1.0),
    ("aten::mul", 4, 1.0), ("aten::sum", 2, 1.0), ("aten::copy_", 2, 0.2),
    ("aten::zeros", 2, 1.2), ("aten::fill_", 2, 0.0), ("aten::t", 2, 0.0),
    ("aten::neg", 1, 1.0), ("aten::div", 1, 1.0),
    ("npu::npu_fusion_attention_grad", 1, 3.0), ("npu::npu_rms_norm_backward", 1, 2.0),
    ("npu::npu_swiglu_backward", 1, 1.0), ("npu::npu_rotary_mul_backward", 1, 1.0),
    ("aten::embedding_dense_backward", 1, 1.0), ("aten::_softmax_backward_data", 1, 1.0),
    ("aten::silu_backward", 1, 1.0),
]
OPTIMIZER_OPS = [
    ("aten::_foreach_mul_", 2, 0.5), ("aten::_foreach_add_", 2, 0.5),
    ("aten::_foreach_addcmul_", 1, 0.5), ("aten::_foreach_addcdiv_", 1, 0.5),
    ("aten::_foreach_sqrt", 1, 2.0), ("aten::_foreach_div_", 1, 0.5),
    ("aten::_foreach_norm", 1, 1.0), ("c10d::allreduce_", 1, 0.5),
    ("aten::empty", 2, 1.5), ("aten::copy_", 1, 0.2),
]
# Allocations whose op the profiler did not record as a cpu_op: no stack to find.
UNTRACED_NAMES = ["hcom_allReduce_", "npu::npu_format_cast_", "aten::set_"]
KERNELS = ["MatMulV2", "Add", "Mul", "Cast", "RmsNorm", "FlashAttentionScore",
           "SwiGlu", "ReduceSum", "Transpose", "MemSet"]

# Size(KB) of small and large blocks: the allocator rounds up to 512 B multiples, which
# is why real files show "x.5" KB.
# Sizes are repeated by weight so that one random() picks one.
SMALL_KB = [0.5] * 30 + [1.5] * 8 + [2.5] * 6 + [4.5] * 12 + [8.5] * 12 + [16.5] * 8 \
    + [32.5] * 6 + [64.5] * 5 + [96.5] * 3 + [128.5] * 2
LARGE_KB = [256.5] * 20 + [512.5] * 16 + [1024.5] * 14 + [2048.5] * 12 + [4096.5] * 10 \
    + [8192.5] * 8 + [16384.5] * 5 + [32768.5] * 2 + [65536.5]
SMALL_SIZES = [int(kb * 1024) for kb in SMALL_KB]
SMALL_ARRAY = pa.array(SMALL_SIZES, pa.int64())
UNTRACED_ARRAY, KERNEL_ARRAY = pa.array(UNTRACED_NAMES), pa.array(KERNELS)
COMM_NAMES = {"hcom_allReduce_", "c10d::allreduce_"}  # rows on the communication stream

OVERLAP_THREADS = ["Communication", "Communication(Not Overlapped)", "Computing", "Free"]
OPS_PER_STEP = 20_000  # a training step's worth of cpu_ops; memory is bounded by it
KERNEL_FRACTION = 0.035  # cpu_ops that launch a Kernel (+ HostToDevice s/f flow)


@dataclass
class RankOptions:
    """What one synthetic rank dir holds; sizes are counts, not bytes."""

    role: str = "actor_update"
    rank_id: int = 0
    capture_time: datetime | str = "20260526_085155"
    n_ops: int = 500  # cpu_op events in trace_view.json
    n_allocs: int = 600  # rows of operator_memory.csv
    n_stacks: int = 64  # distinct call stacks
    stacked_fraction: float = 0.27  # share of cpu_ops that carry a "Call stack"
    trace_format: str = "compact"  # 'compact' (one event a line) or 'pretty' (indent=2, ~10 MB/s)
    with_role_in_metadata: bool = False
    with_mstx: bool = True
    with_overlap: bool = True
    # Device activity beyond the AI Core kernels: an HCCL allreduce per step (the demo's
    # collectives; ranks start a second apart, so the later rank is the one waited for)
    # and every other kernel on a second stream.
    with_collectives: bool = False
    world_size: int = 2
    seed: int = 0
    # Seed of the code the rank runs (its pool of call stacks). The ranks of a role run the
    # same code, so their stack texts are the same (the real two-rank capture in tests/data
    # shares all 36); write_ascend_profile gives them one. None: the rank's own seed.
    code_seed: int | None = None


def write_ascend_rank(dir: Path, **options) -> Path:
    """Write `<dir>/<YYYYmmdd_HHMMSS>_ascend_pt` for one rank; return its path."""
    opts = RankOptions(**options)
    if opts.trace_format not in ("compact", "pretty"):
        raise ValueError(f"trace_format must be 'compact' or 'pretty', not {opts.trace_format!r}")
    if opts.n_ops < 1 or opts.n_allocs < 0 or opts.n_stacks < 1 or not 0 <= opts.stacked_fraction <= 1:
        raise ValueError("need n_ops >= 1, n_allocs >= 0, n_stacks >= 1, 0 <= stacked_fraction <= 1")
    capture = _capture_datetime(opts.capture_time)
    rank_dir = Path(dir) / f"{capture:%Y%m%d_%H%M%S}_ascend_pt"
    out = rank_dir / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    t0_ns = int(capture.timestamp()) * 1_000_000_000 + 596_661_420  # like the sample
    gen = _RankGenerator(opts, t0_ns)
    with open(out / "trace_view.json", "wb") as trace, open(out / "operator_memory.csv", "wb") as csvf:
        gen.write(trace, csvf)
    _write_info(rank_dir, opts, t0_ns, gen.end_ns)
    _write_metadata(rank_dir, opts)
    return rank_dir


def write_ascend_profile(root: Path, roles=("actor_update", "rollout"), ranks: int = 2,
                         layout: str = "role_folders", seed: int = 0,
                         capture_time: datetime | str = "20260526_085155", **size) -> Path:
    """Write a whole job: every (role, rank) rank dir under `root`; return `root`.

    layout 'role_folders' is `<root>/<role>/<capture>_ascend_pt` (role from the folder);
    'flat' puts every rank dir directly under `root` and the role in
    profiler_metadata.json. Roles run one after another (10 minutes apart) and ranks
    start a second apart, so dir names never collide. The ranks of a role share their call
    stacks (one code_seed), as a job's ranks run the same code. `size` goes to RankOptions.
    """
    if layout not in ("role_folders", "flat"):
        raise ValueError(f"layout must be 'role_folders' or 'flat', not {layout!r}")
    root = Path(root)
    base = _capture_datetime(capture_time).timestamp()
    for r, role in enumerate(roles):
        for rank in range(ranks):
            when = datetime.fromtimestamp(base + 600 * r + rank, timezone.utc)
            parent = root / role if layout == "role_folders" else root
            if layout == "flat":
                size = {**size, "with_role_in_metadata": True}
            write_ascend_rank(parent, role=role, rank_id=rank, capture_time=when,
                              world_size=ranks, seed=_derive_seed(seed, role, rank),
                              code_seed=_derive_seed(seed, role, -1), **size)
    return root


def trace_bytes_per_op(trace_format: str = "compact", stacked_fraction: float = 0.27) -> float:
    """Bytes of trace_view.json per cpu_op, measured on this generator (40 k ops, 4 k stacks).

    A cpu_op without a stack, with its share of Kernel/flow events, costs ~205 B compact
    (~265 B pretty); a "Call stack" adds ~1.59 kB (28 frames on average). With 27 %
    stacked: ~635 B per op, so 1.6 M ops make ~1.0 GB.
    """
    plain, stack = {"compact": (205.0, 1593.0), "pretty": (265.0, 1599.0)}[trace_format]
    return plain + stacked_fraction * stack


def ops_for_trace_mb(trace_mb: float, trace_format: str = "compact",
                     stacked_fraction: float = 0.27) -> int:
    """n_ops that makes a trace_view.json of about `trace_mb` MB (10**6 bytes)."""
    return max(1, round(trace_mb * 1e6 / trace_bytes_per_op(trace_format, stacked_fraction)))


# --------------------------------------------------------------------------- details


def _capture_datetime(value) -> datetime:
    """Accept a datetime (naive = UTC) or the dir-name form 'YYYYmmdd_HHMMSS'."""
    if isinstance(value, str):
        value = datetime.strptime(value, "%Y%m%d_%H%M%S")
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def _derive_seed(seed: int, role: str, rank: int) -> int:
    """A per-rank seed that is stable across processes (str hash() is not)."""
    return zlib.crc32(f"{seed}/{role}/{rank}".encode())


def _us(ns: int) -> str:
    """ns -> the profiler's microsecond text with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


class _StackPool:
    """n distinct realistic python stacks, grouped by op name, pre-escaped for JSON.

    Innermost frame first (as torch's profiler writes them): the op's python API frame,
    then model layers, then verl's worker and ray's executor. Depth is 5..40 frames.
    """

    VERL = [
        "verl/workers/actor/dp_actor.py({}): _forward_micro_batch",
        "verl/workers/actor/dp_actor.py({}): update_policy",
        "verl/utils/profiler/performance.py({}): f",
        "verl/workers/fsdp_workers.py({}): update_actor",
        "verl/single_controller/base/decorator.py({}): inner",
        "verl/single_controller/ray/base.py({}): func",
        "ray/util/tracing/tracing_helper.py({}): _resume_span",
        "ray/_private/function_manager.py({}): actor_method_executor",
        "ray/_private/worker.py({}): main_loop",
        "ray/_private/workers/default_worker.py({}): <module>",
    ]
    LAYER = [
        "torch/nn/modules/module.py(1751): _wrapped_call_impl",
        "torch/nn/modules/module.py(1762): _call_impl",
        "transformers/models/qwen2/modeling_qwen2.py({}): forward",
        "torch/distributed/fsdp/fully_sharded_data_parallel.py({}): forward",
        "torch/utils/checkpoint.py({}): checkpoint",
        "transformers/modeling_layers.py({}): __call__",
    ]
    LEAF = {
        "mm": ["torch/nn/modules/linear.py(125): forward"],
        "attention": ["transformers/integrations/npu_flash_attention.py({}): npu_flash_attn_func",
                      "transformers/models/qwen2/modeling_qwen2.py({}): eager_attention_forward"],
        "norm": ["transformers/models/qwen2/modeling_qwen2.py({}): forward"],
        "loss": ["verl/utils/torch_functional.py({}): logprobs_from_logits",
                 "verl/trainer/ppo/core_algos.py({}): compute_policy_loss"],
        "backward": ["torch/autograd/graph.py(824): _engine_run_backward",
                     "torch/autograd/__init__.py(353): backward",
                     "torch/_tensor.py(648): backward"],
        "optim": ["torch/optim/adamw.py({}): _multi_tensor_adamw",
                  "torch/optim/optimizer.py({}): _use_grad", "torch/optim/optimizer.py({}): wrapper"],
        "other": ["torch/_tensor.py({}): __torch_function__"],
    }

    def __init__(self, names: list[str], n: int, rng: random.Random):
        self.by_name: dict[str, list[str]] = {name: [] for name in names}
        seen: dict[str, None] = {}
        j = 0
        while len(seen) < n:
            name = names[j % len(names)]
            j += 1
            text = self._make(name, rng)
            if text not in seen:
                seen[text] = None
                self.by_name[name].append(text)
        every = list(seen)
        for name, stacks in self.by_name.items():  # fewer stacks than names: share
            if not stacks:
                stacks.append(every[zlib.crc32(name.encode()) % len(every)])
        # Flat, grouped by name: a name's stacks are texts[start[name] : start + count].
        self.texts: list[str] = []
        self.start: list[int] = []
        self.count: list[int] = []
        for name in names:
            self.start.append(len(self.texts))
            self.count.append(len(self.by_name[name]))
            self.texts += self.by_name[name]

    def _make(self, name: str, rng: random.Random) -> str:
        rnd = rng.random
        depth = 5 + int(36 * rnd() ** 0.5)  # 5..40, mostly deep, as under verl + ray
        frames = [f.format(40 + int(rnd() * 860)) for f in self.LEAF[self._kind(name)]]
        outer = [f.format(80 + int(rnd() * 1320)) for f in self.VERL[int(rnd() * 5):]]
        while len(frames) + len(outer) < depth:
            frames.append(self.LAYER[int(rnd() * len(self.LAYER))].format(100 + int(rnd() * 800)))
        frames = (frames + outer)[:depth]
        return ";\\r\\n".join(frames)  # JSON text of "frame;\r\nframe"

    @staticmethod
    def _kind(name: str) -> str:
        if "_foreach_" in name or "allreduce" in name:
            return "optim"
        if "backward" in name or "_grad" in name:
            return "backward"
        for key, kind in (("mm", "mm"), ("linear", "mm"), ("attention", "attention"),
                          ("norm", "norm"), ("softmax", "loss"), ("gather", "loss")):
            if key in name:
                return kind
        return "other"


class _RankGenerator:
    """Streams one rank's trace and CSV, one training step at a time.

    Each step is computed column-wise with pyarrow.compute (random draws, times, the
    running totals, and the text of every event and row), so no Python code runs per
    row: that is what makes multi-GB profiles take seconds, not minutes.
    """

    def __init__(self, opts: RankOptions, t0_ns: int):
        self.o = opts
        self.rng = random.Random(opts.seed)
        self.t = t0_ns  # the clock, in ns, always a multiple of 10 like the profiler's
        self.end_ns = t0_ns
        self.pid = 1_800_000 + self.rng.randrange(200_000)
        self.bwd_tid = self.pid + 17  # backward ops run on autograd's thread
        self.seq_base = 0  # autograd Sequence numbers used by earlier steps
        self.dev_pid = 2_097_152 + opts.rank_id  # "Ascend Hardware"
        self.hccl_pid = 2_162_688 + opts.rank_id  # "HCCL"
        self.overlap_pid = 3_550_586_784 + opts.rank_id * 4_096  # > 2**31, like the sample
        self.device = f"NPU:{opts.rank_id % 8}"
        self.stream_ptr, self.comm_stream_ptr = 6, 9  # small ids, as in the sample
        self.base = 18 * 2**30 + self.rng.randrange(2**21) * 512  # weights, before profiling
        self.peak = self.base  # highest live bytes so far: what reserved memory follows
        self.carried = 0  # bytes allocated and never released so far
        self.steps = max(1, -(-opts.n_ops // OPS_PER_STEP))
        if 400 <= opts.n_ops < 2 * OPS_PER_STEP:
            self.steps = 2  # small profiles still show two forward/backward cycles
        # Large blocks grow when a step has few allocations, so that even a demo-sized
        # profile peaks ~10 GB above its base, like a real one (sizes stay "x.5" KB).
        grow = 1
        while grow < 64 and grow * 2 * opts.n_allocs <= self.steps * 18_750:
            grow *= 2
        self.large_sizes = [int(((kb - 0.5) * grow + 0.5) * 1024) for kb in LARGE_KB]
        self.large_array = pa.array(self.large_sizes, pa.int64())
        tables = (FORWARD_OPS, BACKWARD_OPS, OPTIMIZER_OPS)
        self.names = sorted({n for table in tables for n, _, _ in table})
        self.name_array = pa.array(self.names)
        gid = {name: i for i, name in enumerate(self.names)}
        # Per phase, op names repeated by frequency so one uniform draw picks one.
        self.phases = [(pa.array([gid[n] for n, f, _ in t for _ in range(f)], pa.int64()),
                        pa.array([w for _, f, w in t for _ in range(f)], pa.float64()))
                       for t in tables]
        code_rng = self.rng if opts.code_seed is None else random.Random(opts.code_seed)
        pool = _StackPool(self.names, max(1, opts.n_stacks), code_rng)
        self.stack_args = pa.array([f', "Call stack": "{s}"' for s in pool.texts])
        self.stack_start = pa.array(pool.start, pa.int64())
        self.stack_count = pa.array(pool.count, pa.int64())
        self.n_events = 0
        self.n_kernels = 0
        self.busy_until: int | None = None  # end of the device's last busy stretch so far
        self.pretty = opts.trace_format == "pretty"

    def _uniform(self, n: int) -> pa.Array:
        """n doubles in [0, 1) from the seeded Python RNG, drawn in one call."""
        raw = pa.Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(self.rng.randbytes(4 * n))])
        return pc.divide(pc.cast(raw, pa.float64()), 4294967296.0)

    # ---- output plumbing

    def _emit(self, trace, events) -> None:
        """Append events to the JSON array; each text starts with its ",\\n" separator."""
        if not isinstance(events, pa.Array):
            events = pa.array(events, pa.string())
        if len(events) == 0:
            return
        if self.pretty:  # the sample's layout: json indent=2, inside a 2-space array
            texts = [json.dumps(json.loads(e[2:]), indent=2).replace("\n", "\n  ")
                     for e in events.to_pylist()]
            data: bytes | memoryview = ",\n  ".join([""] + texts).encode("ascii")
        else:
            data = _text_bytes(events)
        if not self.n_events:
            trace.write(b"[\n")
            data = data[2:]
        self.n_events += len(events)
        trace.write(data)

    def write(self, trace, csvf) -> None:
        """Draw each step here, in order (that keeps it deterministic), and hand its
        text to two writer threads, one per file: Arrow's kernels release the GIL, so
        the CSV, the trace and the next step's draws use all the cores there are."""
        o = self.o
        csvf.write(CSV_HEADER.encode("ascii"))
        self._emit(trace, self._metadata_events())
        steps = self.steps
        self.t += 5_000_000
        pre = min(o.n_allocs, max(2, o.n_allocs // 2000))  # allocations before the first op
        allocs_left, ops_left = o.n_allocs - pre, o.n_ops
        self._pre_first_op(csvf, pre)
        pending: deque = deque()
        with ThreadPoolExecutor(1) as csv_writer, ThreadPoolExecutor(1) as trace_writer:
            for s in range(steps):
                n_ops = ops_left // (steps - s)
                n_allocs = allocs_left // (steps - s)
                ops_left -= n_ops
                allocs_left -= n_allocs
                ops, allocs, trace_parts = self._draw_step(s, n_ops, n_allocs)
                pending.append((csv_writer.submit(self._write_rows, csvf, allocs),
                                trace_writer.submit(self._write_events, trace, ops, trace_parts)))
                while len(pending) > 2:  # bounded memory: at most two steps in flight
                    for future in pending.popleft():
                        future.result()
            for futures in pending:
                for future in futures:
                    future.result()
        self.end_ns = self.t
        trace.write(b"\n]" if self.n_events else b"[\n]")

    def _metadata_events(self) -> list[str]:
        m = ',\n{{"name": "{}", "pid": {}, "tid": {}, "ph": "M", "args": {{"{}": {}}}}}'
        npu = f'"NPU {self.o.rank_id % 8}"'
        ev = [m.format("process_name", self.pid, 0, "name", '"Python"'),
              m.format("thread_name", self.pid, self.pid, "name", f'"Thread {self.pid}"'),
              m.format("thread_name", self.pid, self.bwd_tid, "name", f'"Thread {self.bwd_tid}"'),
              m.format("process_name", self.dev_pid, 0, "name", '"Ascend Hardware"'),
              m.format("process_labels", self.dev_pid, 0, "labels", npu),
              m.format("thread_name", self.dev_pid, 2, "name", '"Stream 2"')]
        if self.o.with_collectives:
            ev += [m.format("process_name", self.hccl_pid, 0, "name", '"HCCL"'),
                   m.format("thread_name", self.hccl_pid, 0, "name", '"Group 0 Communication"'),
                   m.format("thread_name", self.dev_pid, 3, "name", '"Stream 3"')]
        if self.o.with_overlap:
            p = self.overlap_pid
            ev += [m.format("process_name", p, 0, "name", '"Overlap Analysis"'),
                   m.format("process_labels", p, 0, "labels", npu),
                   m.format("process_sort_index", p, 0, "sort_index", 29)]
            for tid, thread in enumerate(OVERLAP_THREADS):
                ev += [m.format("thread_name", p, tid, "name", f'"{thread}"'),
                       m.format("thread_sort_index", p, tid, "sort_index", tid)]
        return ev

    def _pre_first_op(self, csvf, n: int) -> None:
        """Blocks allocated before the first cpu_op, never released: no op precedes them."""
        names = ["aten::empty", "aten::zeros", "npu::_npu_dtype_cast"]
        live, rows = 0, []
        for i in range(n):
            size = self.large_sizes[self.rng.randrange(len(self.large_sizes))]
            a = str(self.t + i * 20_000)
            live += size
            self.peak = max(self.peak, self.base + live)
            mb = repr((self.base + live) / 1048576)
            rows.append(f'{names[i % 3]},{size / 1024},"{a[:-3]}.{a[-3:]}\t",,,,,{mb},'
                        f'{_reserved_mb(self.peak)},{mb},,,,{self.stream_ptr},{self.device}\n')
        csvf.write("".join(rows).encode("ascii"))
        self.t += n * 20_000 + 1_000_000
        self.carried = live

    # ---- one training step

    def _draw_step(self, step: int, n_ops: int, n_allocs: int):
        """Every random draw of one forward/backward/optimizer step, in a fixed order."""
        step_start = self.t
        ops = self._ops(n_ops)
        allocs = self._allocations(ops, n_allocs)
        parts = self._op_draws(ops)
        extra = []
        if self.o.with_mstx:
            extra += self._mstx_events(step, step_start, ops["bounds"])
        spans = self._collective_spans(ops["bounds"]) if self.o.with_collectives else []
        if self.o.with_overlap:
            parts["overlap"] = self._overlap_events(ops, parts, spans)
        extra += self._collective_events(step, spans)
        parts["extra"] = extra
        return ops, allocs, parts

    def _ops(self, n_ops: int) -> dict:
        """cpu_ops of one step, 45 % forward, 45 % backward, 10 % optimizer: name id,
        phase, ts, dur (ns), allocation weight, and the phase boundaries. Each op ends
        >= 2 us before the next starts, so allocations inside it (and the float
        rounding of 19-digit times that naive readers do) never cross ops."""
        nf = nb = int(n_ops * 0.45)
        parts, bounds = [], []
        for phase, count in enumerate((nf, nb, n_ops - nf - nb)):
            bounds.append(self.t)
            if count == 0:
                continue
            gids, weights = self.phases[phase]
            pick = _index(self._uniform(count), len(gids))
            u1, u2, u3 = self._uniform(count), self._uniform(count), self._uniform(count)
            dur = pc.add(_ns10(pc.multiply(pc.multiply(u1, u2), 400_000.0)), 1_000)  # 1 us..0.4 ms
            span = pc.add(dur, pc.add(_ns10(pc.multiply(u3, 30_000.0)), 2_000))
            ends = pc.cumulative_sum(span)
            parts.append({"gid": pc.take(gids, pick), "w": pc.take(weights, pick),
                          "phase": pa.repeat(pa.scalar(phase, pa.int64()), count),
                          "ts": pc.add(pc.subtract(ends, span), self.t), "dur": dur})
            self.t += ends[-1].as_py()
        bounds.append(self.t)
        self.t += 3_000_000
        ops = {k: pa.concat_arrays([p[k] for p in parts]) for k in ("gid", "w", "phase", "ts", "dur")}
        ops["bounds"] = bounds
        return ops

    def _allocations(self, ops: dict, n: int) -> dict:
        """Exactly n blocks spread over the ops by allocation weight, each with its
        release: activations are freed mirror-wise in backward, gradients by the
        optimizer, temporaries after a few us to a few ms; 0.3 % are never freed."""
        fwd0, bwd0, opt0, end = ops["bounds"]
        # Op i makes blocks first[i]..first[i+1]-1 (floor of the running weight sum).
        scale = n / max(pc.sum(ops["w"]).as_py() or 0.0, 1e-9)
        cum = pc.cast(pc.floor(pc.add(pc.cumulative_sum(pc.multiply(ops["w"], scale)), 1e-6)), pa.int64())
        cum = pc.min_element_wise(cum, n)
        first = pa.concat_arrays([pa.array([0], pa.int64()), cum[:-1], pa.array([n], pa.int64())])
        op = pc.list_parent_indices(pa.ListArray.from_arrays(pc.cast(first, pa.int32()), pa.nulls(n)))
        row = pa.array(range(n), pa.int64())
        ts, dur, phase = pc.take(ops["ts"], op), pc.take(ops["dur"], op), pc.take(ops["phase"], op)
        x, d, y, u, v = (self._uniform(n) for _ in range(5))

        # Allocation time: inside the op; 3 % exactly at its ts; 19 % of an op's later
        # blocks at exactly the same instant as its first block.
        own = pc.add(ts, pc.add(_ns10(pc.multiply(d, pc.add(pc.cast(dur, pa.float64()), 500.0))), 1_000))
        own = pc.if_else(pc.less(x, 0.03), ts, own)
        first_row = pc.take(first, op)
        same = pc.and_(pc.greater(row, first_row), pc.and_(pc.greater_equal(x, 0.03), pc.less(x, 0.22)))
        at = pc.if_else(same, pc.take(own, first_row), own)

        never = pc.greater(y, 0.997)
        act = pc.and_(pc.equal(phase, 0), pc.less(y, 0.35))
        grad = pc.and_(pc.equal(phase, 1), pc.less(y, 0.08))  # sharded grads: few, kept briefly
        large = pc.if_else(act, pc.less(y, 0.24), pc.or_(pc.less(y, 0.04), pc.greater(y, 0.75)))
        size = pc.if_else(large, pc.take(self.large_array, _index(u, len(self.large_sizes))),
                          pc.take(SMALL_ARRAY, _index(u, len(SMALL_SIZES))))

        temp_rt = pc.add(at, pc.add(_ns10(pc.multiply(pc.power(v, 3.0), 5_000_000.0)), 1_000))
        pos = pc.add(pc.subtract(1.0, pc.divide(pc.cast(pc.subtract(at, fwd0), pa.float64()), max(1, bwd0 - fwd0))),
                     pc.multiply(pc.subtract(v, 0.5), 0.04))
        pos = pc.min_element_wise(pc.max_element_wise(pos, 0.0), 1.0)
        act_rt = pc.add(_ns10(pc.multiply(pos, float(opt0 - bwd0))), bwd0)
        grad_rt = pc.add(_ns10(pc.multiply(v, float(end - opt0))), opt0)
        rt = pc.if_else(act, act_rt, pc.if_else(grad, grad_rt, temp_rt))
        rt = pc.max_element_wise(pc.min_element_wise(rt, end), pc.add(at, 1_000))
        # 2 % of temporaries are freed at the exact time a later block is allocated.
        later = pc.take(at, pc.min_element_wise(pc.add(row, 3), max(n - 1, 0)))
        tie = pc.and_(pc.and_(pc.greater(y, 0.98), pc.invert(never)), pc.greater(later, pc.add(at, 1_000)))
        rt = pc.if_else(tie, later, rt)
        rt = pc.if_else(never, pa.scalar(None, pa.int64()), rt)

        # 2 % carry the name of an op the trace does not hold.
        name = pc.take(self.name_array, pc.take(ops["gid"], op))
        untraced = pc.and_(pc.greater(x, 0.90), pc.less(x, 0.92))
        name = pc.if_else(untraced, pc.take(UNTRACED_ARRAY, _index(d, len(UNTRACED_NAMES))), name)
        jitter = pc.multiply(_index(self._uniform(n), 300), 10)  # active release comes first
        return {"name": name, "at": at, "rt": rt, "size": size, "jitter": jitter}

    def _write_rows(self, csvf, a: dict) -> None:
        """Running totals (releases first at equal times), then the CSV rows in
        allocation-time order. Never-released bytes carry over to the next step."""
        n = len(a["at"])
        if n == 0:
            return
        at, rt, size = a["at"], a["rt"], a["size"]
        never = pc.is_null(rt)
        delta = pa.concat_arrays([size, pc.if_else(never, 0, pc.negate(size))])
        events = pa.table({
            "t": pa.concat_arrays([at, pc.fill_null(rt, 2**62)]),
            "release_first": pa.concat_arrays([pa.repeat(pa.scalar(1, pa.int8()), n),
                                               pa.repeat(pa.scalar(0, pa.int8()), n)]),
        })
        order = pc.sort_indices(events, sort_keys=[("t", "ascending"), ("release_first", "ascending")])
        live = pc.add(pc.cumulative_sum(pc.take(delta, order)), self.base + self.carried)
        peak = pc.max_element_wise(pc.cumulative_max(live), self.peak)
        reserved = _reserved_mb(peak)
        back = pc.sort_indices(order)  # the inverse permutation: event -> its position
        live, reserved = pc.take(live, back), pc.take(reserved, back)
        self.peak = pc.max(peak).as_py()
        self.carried += pc.sum(delta).as_py()

        tot_a, res_a = live[:n], reserved[:n]
        tot_r = pc.if_else(never, pa.scalar(None, pa.int64()), live[n:])
        res_r = pc.if_else(never, pa.scalar(None, pa.int64()), reserved[n:])
        jitter = a["jitter"]
        ar = pc.min_element_wise(rt, pc.max_element_wise(pc.subtract(rt, jitter), pc.add(at, 1_000)),
                                 skip_nulls=False)  # never released: no active release either
        amb = pc.divide(pc.cast(tot_a, pa.float64()), 1048576.0)
        # an eighth of the rows carry totals rounded to 5 decimals, as real files do
        rounded = pc.equal(pc.bit_wise_and(pc.shift_right(tot_a, 9), 7), 0)
        amb = pc.cast(pc.if_else(rounded, pc.round(amb, ndigits=5), amb), pa.string())
        rmb = pc.cast(pc.divide(pc.cast(tot_r, pa.float64()), 1048576.0), pa.string())
        comm = pc.is_in(a["name"], value_set=pa.array(sorted(COMM_NAMES)))
        tail = pc.if_else(comm, f"{self.comm_stream_ptr},{self.device}\n", f"{self.stream_ptr},{self.device}\n")
        cells = [a["name"], pc.cast(pc.divide(pc.cast(size, pa.float64()), 1024.0), pa.string()),
                 _quoted_us(at), _quoted_us(rt), _quoted_us(ar),
                 _quoted_us(pc.subtract(rt, at)), _quoted_us(pc.subtract(ar, at)),
                 amb, pc.cast(res_a, pa.string()), amb,
                 rmb, pc.cast(res_r, pa.string()), rmb, tail]
        rows = pc.binary_join_element_wise(*cells, ",", null_handling="replace", null_replacement="")
        csvf.write(_text_bytes(pc.take(rows, pc.sort_indices(at))))  # sort is stable

    def _op_draws(self, ops: dict) -> dict:
        """Which cpu_ops carry which stack, and which launch a Kernel (and its timing)."""
        n = len(ops["ts"])
        # torch_npu writes no stack on backward ops (they run on autograd's thread), so the
        # stacks go to forward and optimizer ops, keeping stacked_fraction of all ops.
        forward_share = max(1.0 - 0.45, 1e-9)
        stacked = pc.and_(pc.less(self._uniform(n), min(1.0, self.o.stacked_fraction / forward_share)),
                          pc.not_equal(ops["phase"], 1))
        picked = _index(self._uniform(n), 1, scale=pc.take(self.stack_count, ops["gid"]))
        sid = pc.add(pc.take(self.stack_start, ops["gid"]), picked)
        launch = pc.less(self._uniform(n), KERNEL_FRACTION)
        k = pc.sum(launch).as_py() or 0
        first_id = self.n_kernels + 1
        self.n_kernels += k
        return {"stack": pc.if_else(stacked, sid, pa.scalar(None, pa.int64())), "launch": launch,
                "kernel_id": pa.array(range(first_id, first_id + k), pa.int64()),
                "latency": pc.add(_ns10(pc.multiply(self._uniform(k), 200_000.0)), 20_000),
                "kernel_dur": pc.add(_ns10(pc.multiply(self._uniform(k), 90_000.0)), 1_000),
                "kernel": pc.take(KERNEL_ARRAY, _index(self._uniform(k), len(KERNELS)))}

    def _write_events(self, trace, ops: dict, d: dict) -> None:
        """cpu_op X events (stacked_fraction of them with a "Call stack" of their name),
        a Kernel X event and its HostToDevice s/f flow for a few, then mstx/overlap."""
        n = len(ops["ts"])
        pid, dev = self.pid, self.dev_pid
        backward = pc.equal(ops["phase"], 1)
        tid = pc.if_else(backward, str(self.bwd_tid), str(pid))
        ts = _us_text(ops["ts"])
        # Autograd links as torch_npu writes them: forward op i has Sequence number i and
        # Fwd thread id 0; backward ops run mirror-wise, the k-th is the node of forward op
        # nf - 1 - k (Fwd thread id 1); optimizer ops have -1. Numbers grow across steps.
        index = pa.array(range(n), pa.int64())
        nf = pc.sum(pc.equal(ops["phase"], 0)).as_py() or 0
        mirror = pc.subtract(2 * nf - 1, index)
        seq = pc.if_else(pc.equal(ops["phase"], 0), index,
                         pc.if_else(pc.and_(backward, pc.greater_equal(mirror, 0)), mirror, -1))
        seq = pc.if_else(pc.equal(seq, -1), seq, pc.add(seq, self.seq_base))
        self.seq_base += nf
        self._emit(trace, pc.binary_join_element_wise(
            ',\n{"ph": "X", "name": "', pc.take(self.name_array, ops["gid"]),
            f'", "pid": {pid}, "tid": ', tid, ', "ts": "', ts, '", "dur": ', _us_text(ops["dur"]),
            ', "cat": "cpu_op", "args": {"Sequence number": ', pc.cast(seq, pa.string()),
            ', "Fwd thread id": ', pc.if_else(backward, "1", "0"), pc.take(self.stack_args, d["stack"]), "}}",
            "", null_handling="replace", null_replacement=""))

        if len(d["kernel_id"]):
            launch, ids = d["launch"], pc.cast(d["kernel_id"], pa.string())
            kts = _us_text(pc.add(pc.filter(ops["ts"], launch), d["latency"]))
            join = lambda *parts: pc.binary_join_element_wise(*parts, "")  # noqa: E731
            self._emit(trace, join(',\n{"ph": "s", "bp": "e", "name": "HostToDevice", "id": "', ids,
                                   f'", "pid": {pid}, "tid": ', pc.filter(tid, launch), ', "ts": "',
                                   pc.filter(ts, launch), '", "cat": "HostToDevice"}'))
            if self.o.with_collectives:  # odd kernels on a second stream
                stream = pc.if_else(pc.equal(pc.bit_wise_and(d["kernel_id"], 1), 1), "3", "2")
            else:
                stream = pa.array(["2"] * len(d["kernel_id"]), pa.string())
            self._emit(trace, join(',\n{"ph": "X", "name": "', d["kernel"], f'", "pid": {dev}, "tid": ', stream,
                                   ', "ts": "', kts, '", "dur": ', _us_text(d["kernel_dur"]), ', "cat": "Kernel", '
                                   '"args": {"Task Type": "AI_CORE", "Physic Stream Id": ', stream,
                                   ', "Task Id": ', ids, "}}"))
            self._emit(trace, join(',\n{"ph": "f", "bp": "e", "name": "HostToDevice", "id": "', ids,
                                   f'", "pid": {dev}, "tid": ', stream, ', "ts": "', kts,
                                   '", "cat": "HostToDevice"}'))
        self._emit(trace, d["extra"])
        if "overlap" in d:
            self._emit(trace, d["overlap"])

    def _mstx_events(self, step, step_start, bounds) -> list[str]:
        """A range named after the role (what role_timeline draws), phase ranges, marks."""
        pid, o = self.pid, self.o
        fwd0, bwd0, opt0, end = bounds

        def span(name, a, b, domain):
            return (f',\n{{"ph": "X", "name": "{name}", "pid": {pid}, "tid": {pid}, "ts": "{_us(a)}", '
                    f'"dur": {_us(b - a)}, "cat": "mstx", "args": {{"domain": "{domain}"}}}}')

        def mark(name, a):
            return (f',\n{{"ph": "i", "name": "{name}", "pid": {pid}, "tid": {pid}, "ts": "{_us(a)}", '
                    f'"s": "t", "cat": "mstx", "args": {{"domain": "default"}}}}')

        return [mark(f"step_{step}_begin", step_start), span(o.role, step_start, end, "default"),
                span("forward", fwd0, bwd0, "verl"), span("backward", bwd0, opt0, "verl"),
                span("optimizer_step", opt0, end, "verl"), mark(f"step_{step}_end", end)]

    @staticmethod
    def _collective_spans(bounds) -> list[tuple[int, int]]:
        """The step's two HCCL allreduces (ns): the gradients' in the second half of
        backward, the optimizer's in the first half of the optimizer step."""
        fwd0, bwd0, opt0, end = bounds
        comm_end = opt0 + (end - opt0) // 2 // 10 * 10
        mid = bwd0 + (opt0 - bwd0) // 2 // 10 * 10
        return [(mid, opt0), (opt0, comm_end)]

    def _collective_events(self, step, spans) -> list[str]:
        """The allreduces as HCCL ops on the "Group 0 Communication" thread."""
        p = self.hccl_pid
        return [(f',\n{{"name": "hcom_allReduce__{step}_{k}_1", "pid": {p}, "tid": 0, "ts": "{_us(a)}", '
                 f'"dur": {_us(b - a)}, "ph": "X", "args": {{"model id": 4294967295, "data_type": "FP32", '
                 f'"alg_type": "MESH-RING", "count": {4096 * (k + 1)}}}}}')
                for k, (a, b) in enumerate(spans)]

    def _overlap_events(self, ops: dict, d: dict, spans: list[tuple[int, int]]) -> pa.Array:
        """Computing / Communication / Communication(Not Overlapped) / Free X events, derived
        from this step's device ops as the Ascend profiler derives them from its tasks:
        Computing is the union of the kernels, Communication the union of the collectives,
        Communication(Not Overlapped) the collectives' time no kernel runs, Free the gaps
        where neither runs, from the end of the device's last busy stretch (the previous
        step's, so the pause between steps is Free too) to the end of this step's."""
        k_start = pc.add(pc.filter(ops["ts"], d["launch"]), d["latency"])
        k_end = pc.add(k_start, d["kernel_dur"])
        c_start = pa.array([a for a, _ in spans], pa.int64())
        c_end = pa.array([b for _, b in spans], pa.int64())
        compute = _union(k_start, k_end)
        comm = _union(c_start, c_end)
        exposed = _minus(comm, compute)
        busy_s, busy_e = _union(pa.concat_arrays([k_start, c_start]), pa.concat_arrays([k_end, c_end]))
        if len(busy_s) == 0:
            return pa.array([], pa.string())
        free_s, free_e = busy_e[:-1], busy_s[1:]
        if self.busy_until is not None and self.busy_until < busy_s[0].as_py():
            free_s = pa.concat_arrays([pa.array([self.busy_until], pa.int64()), free_s])
            free_e = pa.concat_arrays([busy_s[:1], free_e])
        self.busy_until = busy_e[-1].as_py()
        p = self.overlap_pid
        rows = []
        for tid, (a, b) in ((OVERLAP_THREADS.index("Computing"), compute),
                            (OVERLAP_THREADS.index("Communication"), comm),
                            (OVERLAP_THREADS.index("Communication(Not Overlapped)"), exposed),
                            (OVERLAP_THREADS.index("Free"), (free_s, free_e))):
            if len(a):
                rows.append(pc.binary_join_element_wise(
                    f',\n{{"name": "{OVERLAP_THREADS[tid]}", "pid": {p}, "tid": {tid}, "ts": "', _us_any(a),
                    '", "dur": ', _us_any(pc.subtract(b, a)), ', "ph": "X", "args": {}}', ""))
        return pa.concat_arrays(rows)


# ---- column helpers (pyarrow.compute)


class _Compute:
    """pyarrow.compute, with Python numbers and strings passed as typed scalars.

    Given an untyped Python scalar, pyarrow first tries to import dateutil, which
    costs ~0.2 ms per call where it is not installed: more than the whole
    computation on a 20 k-row column.
    """

    def __getattr__(self, name):
        func = getattr(_pc, name)

        def call(*args, **kwargs):
            return func(*(_typed(a) for a in args), **kwargs)

        setattr(self, name, call)
        return call


def _typed(value):
    if isinstance(value, bool):
        return pa.scalar(value, pa.bool_())
    if isinstance(value, int):
        return pa.scalar(value, pa.int64())
    if isinstance(value, float):
        return pa.scalar(value, pa.float64())
    if isinstance(value, str):
        return pa.scalar(value, pa.string())
    return value


pc = _Compute()


def _index(u: pa.Array, size: int, scale=None) -> pa.Array:
    """floor(u * size) as int64: a uniform pick among `size` (or per-row `scale`) items."""
    return pc.cast(pc.floor(pc.multiply(u, scale if scale is not None else float(size))), pa.int64())


def _ns10(x: pa.Array) -> pa.Array:
    """Float ns -> int64 ns rounded down to 10 ns, the profiler's resolution."""
    return pc.multiply(pc.cast(pc.floor(pc.divide(x, 10.0)), pa.int64()), 10)


def _us_text(ns: pa.Array) -> pa.Array:
    """int64 ns (>= 1000) -> the profiler's microseconds with three decimals."""
    return pc.utf8_replace_slice(pc.cast(ns, pa.string()), start=-3, stop=-3, replacement=".")


def _quoted_us(ns: pa.Array) -> pa.Array:
    """The CSV's time cell: quoted, with a TAB before the closing quote; null stays null."""
    return pc.binary_join_element_wise('"', _us_text(ns), '\t"', "")


def _us_any(ns: pa.Array) -> pa.Array:
    """int64 ns (>= 0) -> microseconds with three decimals, also below 1 us ("0.040")."""
    whole = pc.divide(ns, 1000)  # integer division
    frac = pc.utf8_lpad(pc.cast(pc.subtract(ns, pc.multiply(whole, 1000)), pa.string()), width=3, padding="0")
    return pc.binary_join_element_wise(pc.cast(whole, pa.string()), frac, ".")


def _union(starts: pa.Array, ends: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The union of intervals [start, end) as sorted, disjoint stretches (touching ones merge)."""
    if len(starts) == 0:
        return pa.array([], pa.int64()), pa.array([], pa.int64())
    order = pc.sort_indices(pa.table({"s": starts, "e": ends}), sort_keys=[("s", "ascending"), ("e", "ascending")])
    s, e = pc.take(starts, order), pc.take(ends, order)
    reach = pc.cumulative_max(e)  # the end of everything up to here
    before = pa.concat_arrays([pa.array([-(2**62)], pa.int64()), reach[:-1]])
    new = pc.greater(s, before)  # starts after everything before it ended: a new stretch
    first = pc.indices_nonzero(new)
    last = pa.concat_arrays([pc.subtract(pc.cast(first[1:], pa.int64()), 1),
                             pa.array([len(s) - 1], pa.int64())])
    return pc.filter(s, new), pc.take(reach, last)


def _minus(a: tuple[pa.Array, pa.Array], b: tuple[pa.Array, pa.Array]) -> tuple[pa.Array, pa.Array]:
    """Stretches `a` less the union `b` (both sorted and disjoint): per stretch of a, the
    gaps of b clipped to it. a holds a few stretches (a step's collectives)."""
    b_s, b_e = b
    gap_s = pa.concat_arrays([pa.array([-(2**62)], pa.int64()), b_e])
    gap_e = pa.concat_arrays([b_s, pa.array([2**62], pa.int64())])
    starts, ends = [], []
    for lo, hi in zip(a[0].to_pylist(), a[1].to_pylist()):
        s, e = pc.max_element_wise(gap_s, lo), pc.min_element_wise(gap_e, hi)
        keep = pc.greater(e, s)
        starts.append(pc.filter(s, keep))
        ends.append(pc.filter(e, keep))
    if not starts:
        return pa.array([], pa.int64()), pa.array([], pa.int64())
    return pa.concat_arrays(starts), pa.concat_arrays(ends)


def _reserved_mb(peak):
    """Reserved memory follows the peak of live memory up, in 64 MB chunks, never down."""
    if isinstance(peak, int):
        return ((peak >> 20) // 64 + 1) * 64
    return pc.multiply(pc.add(pc.divide(pc.shift_right(peak, 20), 64), 1), 64)


def _text_bytes(texts: pa.Array) -> memoryview:
    """The concatenated bytes of a string array, without copying."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    offsets = memoryview(texts.buffers()[1]).cast("i")
    start, stop = offsets[texts.offset], offsets[texts.offset + len(texts)]
    data = texts.buffers()[2]
    return memoryview(data)[start:stop] if data is not None else memoryview(b"")


def _write_info(rank_dir: Path, o: RankOptions, t0_ns: int, end_ns: int) -> None:
    """profiler_info_<rank>.json shaped like the sample (rank_id as a string)."""
    start_cnt = 1_855_421_235_760_846 + o.rank_id * 1_000
    info = {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": {"wait": 0, "active": 1, "warmup": 0, "repeat": 1, "skip_first": 0},
                "record_shapes": False, "profile_memory": True, "with_stack": o.stacked_fraction > 0,
                "with_flops": False, "with_modules": False,
            },
            "experimental_config": {
                "_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_NONE", "_l2_cache": False,
                "_msprof_tx": o.with_mstx, "_mstx": o.with_mstx, "_data_simplification": True,
                "record_op_args": False, "_export_type": ["text"], "_host_sys": [], "_op_attr": False,
                "_gc_detect_threshold": None, "_mstx_domain_include": [], "_mstx_domain_exclude": [],
                "_sys_io": False, "_sys_interconnection": False,
            },
        },
        "start_info": {"syscnt_enable": True, "freq": 100, "start_cnt": start_cnt,
                       "start_monotonic": start_cnt * 10},
        "end_info": {"collectionTimeEnd": end_ns,
                     "MonotonicTimeEnd": start_cnt * 10 + (end_ns - t0_ns)},
        "torch_npu_version": "2.9.0",
        "cann_version": "8.5.0",
        "rank_id": str(o.rank_id),
    }
    (rank_dir / f"profiler_info_{o.rank_id}.json").write_text(json.dumps(info, indent=4))


def _write_metadata(rank_dir: Path, o: RankOptions) -> None:
    """profiler_metadata.json: env and parallel groups; "role" only when asked."""
    world = list(range(o.world_size))
    groups = {
        "group_name_0": {"group_name": "default_group", "group_rank": o.rank_id, "global_ranks": world},
        "group_name_1": {"group_name": "dp_cp", "group_rank": o.rank_id, "global_ranks": world},
        "group_name_21": {"group_name": "tp", "group_rank": 0, "global_ranks": [o.rank_id]},
        "group_name_37": {"group_name": "pp", "group_rank": 0, "global_ranks": [o.rank_id]},
    }
    meta = {"ENV_VARIABLES": {"ASCEND_GLOBAL_LOG_LEVEL": "", "HCCL_RDMA_TC": "",
                              "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:2048",
                              "ASCEND_LAUNCH_BLOCKING": ""},
            "parallel_group_info": groups}
    if o.with_role_in_metadata:
        meta["role"] = o.role
    (rank_dir / "profiler_metadata.json").write_text(json.dumps(meta))
