"""What an ingest starts as soon as its plan is made: the Kineto decoding pool.

Why: a PyTorch trace that is the only file to parse is read in the writer's own process,
its pieces decoded by a pool of processes (rlwh.readers.kineto_decoding). Starting them
(Python and the decoding imports, about half a second each) once the plan says the trace
changed lets that start overlap the writer making its scratch database and reading the
trace's head. Not before the plan: an unchanged re-ingest must not pay for them.
"""

from __future__ import annotations

from rlwh.config import Config
from rlwh.ingest.plan import Plan


def start_decoding(plan: Plan, config: Config) -> None:
    """Start the decoding pool when the plan's one file to parse here is a big PyTorch trace."""
    if config.executor != "local" or config.workers <= 1 or config.derive_in_workers:
        return
    from rlwh.ingest.in_place import reads_in_place

    todo = [p for p in plan.files if not (plan.is_unchanged(p) or p.source.ignored or p.source.problem)]
    parsed = [p for p in todo if not reads_in_place(p.source.kind)]
    if len(parsed) == 1 and parsed[0].source.kind == "torch_trace":
        from rlwh.readers import kineto_decoding

        kineto_decoding.prestart(config.workers, parsed[0].source.path)
