"""PyTorch memory snapshots (torch.cuda.memory._snapshot(), pickled) without torch.

A snapshot is plain data: {"segments": [...], "device_traces": [[...], ...]}. Segments list
their blocks at snapshot time; each device's trace lists alloc, free_requested and
free_completed actions with the frames of the code that made them, innermost first, and
`time_us` as newer PyTorch writes it. The pickle holds only dicts, lists, tuples, strings,
numbers and booleans: no class or function is named, as rlwh's reader requires.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path

SEGMENT_BYTES = 8 << 30
SIZES = [512, 4096, 1 << 20, 8 << 20, 64 << 20]
# Innermost first: the allocator's caller, the model, then the user's training code.
FRAMES = [
    [("torch/nn/modules/linear.py", 125, "forward"), ("verl/workers/critic/dp_critic.py", 154, "_forward_micro_batch"),
     ("verl/workers/critic/dp_critic.py", 211, "compute_values"), ("verl/trainer/main_ppo.py", 212, "fit")],
    [("torch/autograd/graph.py", 825, "_engine_run_backward"),
     ("verl/workers/critic/dp_critic.py", 248, "update_critic"), ("verl/trainer/main_ppo.py", 212, "fit")],
    [("torch/optim/adamw.py", 520, "_multi_tensor_adamw"), ("verl/workers/critic/dp_critic.py", 262, "update_critic"),
     ("verl/trainer/main_ppo.py", 212, "fit")],
]


def write_snapshot(path: Path, *, device: int = 0, start_us: int, allocations: int = 300, seed: int = 0) -> Path:
    """A one-device snapshot: an 8 GiB segment, `allocations` blocks allocated one after
    another (addresses reused after a free), most freed again, a few still live at the end."""
    rng = random.Random(f"{seed}-{device}")
    base = 0x7F00_0000_0000 + device * SEGMENT_BYTES
    stream = 7
    t = start_us
    trace = [{"action": "segment_alloc", "addr": base, "size": SEGMENT_BYTES, "stream": stream,
              "frames": _frames(0), "time_us": t}]
    live: dict[int, int] = {}
    free: dict[int, list[int]] = {}
    cursor = base
    for i in range(allocations):
        t += rng.randrange(50, 400)
        size = rng.choice(SIZES)
        addr = free.get(size, []).pop() if free.get(size) else cursor
        if addr == cursor:
            cursor += size
        live[addr] = size
        trace.append({"action": "alloc", "addr": addr, "size": size, "stream": stream,
                      "frames": _frames(i % len(FRAMES)), "time_us": t})
        if live and rng.random() < 0.45:
            gone = rng.choice(sorted(live))
            gone_size = live.pop(gone)
            for action in ("free_requested", "free_completed"):
                t += rng.randrange(5, 40)
                trace.append({"action": action, "addr": gone, "size": gone_size, "stream": stream,
                              "frames": _frames(1), "time_us": t})
            free.setdefault(gone_size, []).append(gone)
    blocks = [{"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": _frames(0)}
              for a, s in sorted(live.items())]
    used = sum(live.values())
    blocks.append({"address": cursor, "size": base + SEGMENT_BYTES - cursor, "requested_size": 0,
                   "state": "inactive", "frames": []})
    segment = {"device": device, "address": base, "total_size": SEGMENT_BYTES, "allocated_size": used,
               "active_size": used, "requested_size": used, "stream": stream, "segment_type": "large",
               "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}
    traces: list[list[dict]] = [[] for _ in range(device)] + [trace]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"segments": [segment], "device_traces": traces}, protocol=4))
    return path


def _frames(kind: int) -> list[dict]:
    return [{"filename": f, "line": line, "name": name} for f, line, name in FRAMES[kind]]
