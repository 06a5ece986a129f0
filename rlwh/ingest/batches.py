"""Which changed files are read together: the batches of one kind that one statement reads.

Readers that DuckDB does the reading for (rlwh.readers.ascend_trace.read_batch) read a
list of files in one read_json: one connection, one scan, one staging file and each
distinct stack text normalized once per batch, instead of all of that per file. A run
is many modest files, so that fixed work per file was the cost (DESIGN.md, 2026-12-02).

The rule, for the files of one kind whose reader reads batches:
- a batch holds at most BATCH_FILES files and BATCH_BYTES bytes of input. Memory stays
  bounded whatever the run's size: a batch's kept events (a fraction of its bytes, each
  stack text stored once per row group by Parquet's dictionary) and its stacks table are
  all a worker holds beyond one file's working set, its DuckDB spills past the worker's
  memory limit, and 1,000 ranks are just more batches;
- a file of BATCH_BYTES / 2 or more is read alone (a batch gains it nothing: its scan
  dominates, and alone it keeps the per-file memory bound);
- at least two batches per worker where there are files enough, so the workers finish
  together instead of one waiting on the last big batch;
- a batch of one file is no batch: it is read by the plain per-file task.
Every file keeps its own parts, sources row and transaction (rlwh.ingest.parse.parse_batch
falls back to reading the files one by one when the batch cannot be read).
"""

from __future__ import annotations

import math

from rlwh.ingest.jobs import jobs
from rlwh.ingest.plan import Planned

BATCH_FILES = 32
BATCH_BYTES = 256 * 2**20


def batches(files: list[Planned], workers: int) -> list[list[Planned]]:
    """The batches of `files` (in their order) by the rule above; files left out are read alone."""
    by_kind: dict[str, list[Planned]] = {}
    for p in files:
        if p.size < BATCH_BYTES // 2 and jobs()[p.source.kind].batch_function() is not None:
            by_kind.setdefault(p.source.kind, []).append(p)
    found = []
    for group in by_kind.values():
        total = sum(p.size for p in group)
        count = max(math.ceil(total / BATCH_BYTES), math.ceil(len(group) / BATCH_FILES), 2 * max(1, workers))
        count = min(count, len(group))
        found += [b for b in _split(group, count) if len(b) > 1]
    return found


def _split(group: list[Planned], count: int) -> list[list[Planned]]:
    """`group` cut, in order, into `count` runs of about equal bytes; a run closes before it
    would pass BATCH_FILES files or BATCH_BYTES bytes."""
    target = sum(p.size for p in group) / count
    runs: list[list[Planned]] = [[]]
    size = 0
    for p in group:
        current = runs[-1]
        if current and (size + p.size > BATCH_BYTES or len(current) >= BATCH_FILES or size >= target):
            runs.append([])
            size = 0
        runs[-1].append(p)
        size += p.size
    return runs
