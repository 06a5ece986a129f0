"""Generate a Kineto-shaped PyTorch trace of a chosen size, for tests and benchmarks.

Real traces of 1 GB+ cannot live in the repo, so this writes one with the layout that
makes streaming hard: cpu_ops and user annotations first, then "[memory]" events, then
the python_function events that enclose the ops, and optionally the metadata keys
(distributedInfo, baseTimeNanoseconds, deviceProperties) after traceEvents. Memory
stays flat while generating: the three sections are written to temp files and joined.

Usage: python bench/gen_torch_trace.py OUT.json SIZE_MB [--gzip] [--meta-after]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import tempfile
from pathlib import Path

BASE_NS = 1790857026000000000
T0_NS = 5138299378167396  # Kineto ts (µs since baseTimeNanoseconds) of the first event, in ns
PID = 4189
TIDS = (4189, 4202)
_FRAMES = [f"rlwh_demo/model_{i % 17}.py({10 + i * 7}): fn_{i}" for i in range(160)]
_OPS = ["aten::empty", "aten::linear", "aten::addmm", "aten::add", "aten::mul", "aten::t",
        "aten::copy_", "aten::to", "aten::zeros", "aten::matmul", "aten::softmax"]


def us(ns: int) -> str:
    """A ns integer as Kineto writes µs: exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


class _Writer:
    """Builds one trace: a call tree per step, each event written to its section file."""

    def __init__(self, ops, mem, py, rng: random.Random):
        self.ops, self.mem, self.py, self.rng = ops, mem, py, rng
        self.counts = {"cpu_op": 0, "python_function": 0, "memory": 0, "user_annotation": 0}
        self.py_id = 0
        self.ext_id = 0
        self.ev_idx = 0
        self.addr = 94412369700736
        self.live: list[tuple[int, int]] = []
        self.allocated = 0

    def frame(self, tid, start, parent, depth, name_idx) -> int:
        """One python_function with children; returns its end time (ns).

        A frame's children are drawn from two names fixed by its own name, so the number
        of distinct call paths stays in the thousands, as in real programs.
        """
        rng = self.rng
        self.py_id += 1
        my_id = self.py_id
        name = _FRAMES[name_idx]
        t = start + rng.randrange(50, 900)
        for _ in range(rng.randrange(1, 4)):
            r = rng.random()
            child = (name_idx * 7 + rng.randrange(2) * 13 + 1) % len(_FRAMES)
            if depth >= 9 or r < 0.35:
                t = self.op(tid, t, 0) + rng.randrange(20, 400)
            elif r < 0.7:
                t = self.leaf(tid, t, my_id) + rng.randrange(20, 400)
            else:
                t = self.frame(tid, t, my_id, depth + 1, child) + rng.randrange(20, 400)
        end = t + rng.randrange(10, 300)
        self._py_event(tid, start, end, name, parent, my_id)
        return end

    def leaf(self, tid, start, parent) -> int:
        """A builtin call with no children, like most python_function events."""
        self.py_id += 1
        end = start + self.rng.randrange(100, 3000)
        self._py_event(tid, start, end, "<built-in method get of dict object at 0x7fab6037ff40>",
                       parent, self.py_id)
        return end

    def _py_event(self, tid, start, end, name, parent, py_id):
        parent_txt = "null" if parent is None else str(parent)
        self.py.write(
            f'  {{\n    "ph": "X", "cat": "python_function", "name": "{name}", "pid": {PID}, '
            f'"tid": {tid},\n    "ts": {us(start)}, "dur": {us(end - start)},\n    "args": {{\n'
            f'      "Python parent id": {parent_txt}, "Python id": {py_id}, "Ev Idx": {self.ev_idx}\n'
            f"    }}\n  }},\n"
        )
        self.ev_idx += 1
        self.counts["python_function"] += 1

    def op(self, tid, start, depth) -> int:
        """One cpu_op, maybe with a nested op and memory events; returns its end."""
        rng = self.rng
        name = _OPS[rng.randrange(len(_OPS))]
        t = start + rng.randrange(100, 2000)
        if depth == 0 and rng.random() < 0.4:
            t = self.op(tid, t, 1) + rng.randrange(10, 200)
        if rng.random() < 0.5:
            t = self.memory(tid, t) + rng.randrange(10, 200)
        end = t + rng.randrange(0, 500)
        self.ext_id += 1
        self.ops.write(
            f'  {{\n    "ph": "X", "cat": "cpu_op", "name": "{name}", "pid": {PID}, "tid": {tid},\n'
            f'    "ts": {us(start)}, "dur": {us(end - start)},\n    "args": {{\n'
            f'      "External id": {self.ext_id},"Record function id": 0, "Concrete Inputs": '
            f'["", "", ""], "Input type": ["float", "float", "Scalar"], "Input Strides": '
            f'[[128, 1], [128, 1], []], "Input Dims": [[256, 128], [256, 128], []], '
            f'"Ev Idx": {self.ev_idx}\n    }}\n  }},\n'
        )
        self.ev_idx += 1
        self.counts["cpu_op"] += 1
        return end

    def memory(self, tid, ts) -> int:
        """An allocation, or a free of a live block (address reuse happens naturally)."""
        rng = self.rng
        if self.live and rng.random() < 0.45:
            addr, size = self.live.pop(rng.randrange(len(self.live)))
            delta = -size
        else:
            size = rng.choice((512, 1024, 4096, 131072))
            if self.live and rng.random() < 0.1:
                addr = self.live[-1][0] + 64
            else:
                self.addr += 1 << 20
                addr = self.addr
            self.live.append((addr, size))
            if len(self.live) > 500:
                self.live.pop(0)
            delta = size
        self.allocated += delta
        self.mem.write(
            f'  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",\n'
            f'    "pid": {PID}, "tid": {tid},\n    "ts": {us(ts)},\n    "args": {{\n'
            f'      "Total Reserved": 0, "Total Allocated": {self.allocated}, "Bytes": {delta}, '
            f'"Device Id": -1, "Device Type": 0, "Addr": {addr}, "Ev Idx": {self.ev_idx}\n'
            f"    }}\n  }},\n"
        )
        self.ev_idx += 1
        self.counts["memory"] += 1
        return ts + rng.randrange(1, 50)

    def annotation(self, tid, start, end, name):
        self.ops.write(
            f'  {{\n    "ph": "X", "cat": "user_annotation", "name": "{name}", "pid": {PID}, '
            f'"tid": {tid},\n    "ts": {us(start)}, "dur": {us(end - start)},\n'
            f'    "args": {{\n      "External id": 0, "Ev Idx": {self.ev_idx}\n    }}\n  }},\n'
        )
        self.ev_idx += 1
        self.counts["user_annotation"] += 1


def gen_torch_trace(path: Path, size_bytes: int, *, seed: int = 0, compress: bool = False,
                    meta_after: bool = False, rank: int | None = 0) -> dict:
    """Write a trace of about `size_bytes` (uncompressed) to `path`; returns event counts.

    rank=None leaves distributedInfo out (the reader then needs the file name).
    """
    rng = random.Random(seed)
    path = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        parts = [Path(tmp) / n for n in ("ops", "mem", "py")]
        with open(parts[0], "w") as ops, open(parts[1], "w") as mem, open(parts[2], "w") as py:
            w = _Writer(ops, mem, py, rng)
            t = T0_NS + 200_000
            step = 0
            while ops.tell() + mem.tell() + py.tell() < size_bytes:
                tid = TIDS[step % len(TIDS)]
                start = t
                for _ in range(20):
                    t = w.frame(tid, t, None, 0, rng.randrange(6)) + rng.randrange(10, 100)
                w.annotation(tid, start, t, f"ProfilerStep#{step}")
                t += rng.randrange(1000, 5000)
                step += 1
        dist = {"backend": "gloo", "rank": rank, "world_size": 2, "pg_count": 1,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2,
                               "ranks": [0, 1]}]}
        meta = {"deviceProperties": [{"id": 0, "name": "Fake GPU", "totalGlobalMem": 1 << 34}]}
        if rank is not None:
            meta["distributedInfo"] = dist
        meta["baseTimeNanoseconds"] = BASE_NS
        head = ['{\n  "schemaVersion": 1,\n  "trace_id": "GEN", "host_name": "gen",\n']
        meta_txt = "".join(f'  "{k}": {json.dumps(v)},\n' for k, v in meta.items())
        if not meta_after:
            head.append(meta_txt)
        head.append('  "traceEvents": [\n')
        head.append(
            f'  {{\n    "ph": "M", "name": "process_name", "ts": {us(T0_NS + 100)}, '
            f'"pid": {PID}, "tid": 0,\n    "args": {{"name": "python"}}\n  }},\n'
        )
        tail = (
            f'  {{\n    "ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", '
            f'"tid": "PyTorch Profiler", "ts": {us(T0_NS)}, "dur": {us(t - T0_NS)},\n'
            f'    "args": {{"Op count": 0}}\n  }}\n  ]'
        )
        if meta_after:
            tail += ",\n" + meta_txt.rstrip(",\n") + "\n"
        tail += ', "traceName": "gen.json"\n}\n'
        opener = gzip.open if compress else open
        with opener(path, "wb") as out:
            out.write("".join(head).encode())
            for part in parts:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
            out.write(tail.encode())
    return dict(w.counts, steps=step, first_ts_ns=BASE_NS + T0_NS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("size_mb", type=float)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--meta-after", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    counts = gen_torch_trace(args.out, int(args.size_mb * 1e6), seed=args.seed,
                             compress=args.gzip, meta_after=args.meta_after)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
