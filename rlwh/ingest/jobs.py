"""Ingest jobs: one file in ingest/ per source format.

A job names its reader (a module in rlwh/readers with a `read(path, sink, context)`
function), the base tables it fills, and the SQL that lands the reader's staged rows. A
job may also say how its file is read (rlwh.readers.csv_job): then its reader runs that
SQL and the landing SQL follows `-- land:`.
The runner refuses a job that lacks any of these, so a new format cannot half-load.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rlwh.assets import asset_dir
from rlwh.errors import RlwhError
from rlwh.sqltext import job_sections

FACT_TABLES = ("ranks", "memory_records", "cpu_ops", "ranges", "torch_memory_events", "gmm_expert_load",
               "memory_usage", "npu_module_memory", "step_times", "snapshot_segments", "snapshot_blocks",
               "snapshot_trace_blocks", "train_metrics", "device_ops", "communication_links",
               "collective_transfers")
SHARED_TABLES = ("call_stacks",)
# Fact tables whose rows may have no rank: a training log's place names one only sometimes.
RANK_OPTIONAL_TABLES = ("train_metrics",)


@dataclass(frozen=True)
class Job:
    kind: str
    reader: str
    fills: tuple[str, ...]
    sql: str
    path: Path

    @property
    def has_statements(self) -> bool:
        """False for a job whose reader's outcome is all it loads (a ranks row)."""
        code = [ln for ln in self.sql.splitlines() if ln.strip() and not ln.strip().startswith("--")]
        return bool(code)

    def read_function(self):
        # "module" or "module:function": one reader module may serve several formats.
        module_name, _, function = self.reader.partition(":")
        return self._function(module_name, function or "read")

    def in_place_function(self):
        """The reader's `read_in_place(con, paths, context, scratch)`, which reads a batch of files of
        the kind in the warehouse's own connection (rlwh.ingest.in_place); None for a reader
        whose files are parsed in workers."""
        function = self.reader.partition(":")[2]
        return self.reader_setting(f"{function}_in_place" if function else "read_in_place")

    def reader_setting(self, name: str, default=None):
        """What the reader's module sets `name` to, else `default` (an in-place reader's
        batch size and lane: rlwh.ingest.in_place)."""
        return getattr(importlib.import_module(self.reader.partition(":")[0]), name, default)

    def _function(self, module_name: str, function: str):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RlwhError(f"ingest/{self.path.name}: reader {self.reader} cannot be imported: {exc}") from exc
        read = getattr(module, function, None)
        if not callable(read):
            raise RlwhError(f"ingest/{self.path.name}: reader {self.reader} has no {function}() function")
        return read


def parse_job(path: Path) -> Job:
    headers: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("--") and ":" in stripped:
            key, value = stripped[2:].split(":", 1)
            if key.strip() in ("job", "reader", "fills"):
                headers[key.strip()] = value.strip()
    missing = [k for k in ("job", "reader", "fills") if not headers.get(k)]
    if missing:
        raise RlwhError(f"ingest/{path.name} lacks its {', '.join(missing)} line(s)")
    if headers["job"] != path.stem:
        raise RlwhError(f"ingest/{path.name} says job {headers['job']}; the file name must be the job name")
    fills = tuple(t.strip() for t in headers["fills"].split(","))
    unknown = [t for t in fills if t not in FACT_TABLES + SHARED_TABLES]
    if unknown:
        raise RlwhError(f"ingest/{path.name} fills unknown table(s) {', '.join(unknown)}")
    # A job that reads its file in SQL (`-- read <table>:` sections, run by its reader in the
    # parse worker) lands with its `-- land:` section; others are all landing SQL.
    return Job(headers["job"], headers["reader"], fills, job_sections(path.read_text(encoding="utf-8"))["land"], path)


@lru_cache(maxsize=None)
def jobs() -> dict[str, Job]:
    """Every job in ingest/, by the source kind it handles."""
    found = {}
    for path in sorted(asset_dir("ingest").glob("*.sql")):
        job = parse_job(path)
        job.read_function()  # fail early on a job whose reader is missing
        found[job.kind] = job
    return found
