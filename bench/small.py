"""`bench/run.py --only small`: the fixed cost of a small ingest and of a query (issue 27).

One small real Kineto trace (an AMD MI250 training step from HTA's test data) against
what a bare Python program pays for the same work, in the same run, each command a fresh
process, repeated and interleaved so a busy machine slows both alike:

- `rlwh ingest` into a new warehouse against a bare load: json.load of the trace, a
  pyarrow table of its events, a new DuckDB file holding it;
- an unchanged re-ingest, and `rlwh query "select count(*) from cpu_ops"`, against a bare
  connect-and-query of the warehouse.

The figures are medians of wall seconds (CPU seconds beside them); the first ingest of
all, which builds the schema template (rlwh.warehouse.template), is reported on its own.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from pathlib import Path

from measure import measure

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
TRACE = "real/kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
REPEATS = 7

BARE_LOAD = """
import gzip, json, sys
import duckdb, pyarrow as pa
with gzip.open(sys.argv[1], "rt") as f:
    events = json.load(f)["traceEvents"]
keys = ("name", "ph", "cat", "ts", "dur", "pid", "tid")
events_table = pa.table({k: pa.array([None if e.get(k) is None else str(e.get(k)) for e in events]) for k in keys})
con = duckdb.connect(sys.argv[2])
con.execute("create table events as select * from events_table")
con.close()
"""

BARE_QUERY = """
import sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print(con.execute("select count(*) from cpu_ops").fetchall())
"""


def small_trace() -> Path:
    """The trace, from the tests' data or ../shared/fixtures (RLWH_SHARED)."""
    shared = Path(os.environ.get("RLWH_SHARED", REPO.parent / "shared")) / "fixtures"
    for root in (REPO / "tests" / "data", shared):
        if (root / TRACE).is_file():
            return root / TRACE
    raise SystemExit(f"the small real trace is missing: {TRACE} under tests/data or {shared}")


def _rlwh(*args: str, db: Path) -> list[str]:
    return [PY, "-m", "rlwh", *args, "--db", str(db), "--config", str(REPO / "warehouse.toml")]


def _run(argv: list[str], env: dict) -> tuple[float, float]:
    m = measure(argv, env=env)
    if m.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{m.stdout}\n{m.stderr}")
    return m.wall_s, m.cpu_s


def _fresh(db: Path) -> None:
    for path in (db, db.with_name(db.name + ".wal")):
        path.unlink(missing_ok=True)


def bench_small(tmp: Path, record) -> None:
    trace = small_trace()
    profile = tmp / "small" / "actor_update"
    profile.mkdir(parents=True)
    shutil.copy(trace, profile / trace.name)
    profile = profile.parent
    cache = tmp / "small_cache"
    env = {"RLWH_CACHE_DIR": str(cache)}  # its own schema template: the first ingest builds it
    db, bare_db = tmp / "small.duckdb", tmp / "small_bare.duckdb"
    first = _run(_rlwh("ingest", str(profile), "-q", db=db), env)
    kinds = ("bare load", "new", "unchanged", "query", "bare query")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for _ in range(REPEATS):
        _fresh(bare_db)
        times["bare load"].append(_run([PY, "-c", BARE_LOAD, str(trace), str(bare_db)], env))
        _fresh(db)
        times["new"].append(_run(_rlwh("ingest", str(profile), "-q", db=db), env))
        times["unchanged"].append(_run(_rlwh("ingest", str(profile), "-q", db=db), env))
        times["query"].append(_run(_rlwh("query", "select count(*) from cpu_ops", "--format", "csv", db=db), env))
        times["bare query"].append(_run([PY, "-c", BARE_QUERY, str(db)], env))
    wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    load = os.getloadavg()
    kb = trace.stat().st_size / 1024
    common = {"repeats": REPEATS, "load_1min": load[0]}
    record(f"small trace ({kb:.0f} KB gz): bare load (json.load, pyarrow table, new DuckDB file)",
           wall_s=wall["bare load"], cpu_s=cpu["bare load"], **common)
    record("small trace: rlwh ingest into a new warehouse", wall_s=wall["new"], cpu_s=cpu["new"],
           vs_bare_load=wall["new"] / wall["bare load"], target=2.0, first_ingest_building_the_template_s=first[0],
           **common)
    record("small trace: bare connect-and-query", wall_s=wall["bare query"], cpu_s=cpu["bare query"], **common)
    record("small trace: unchanged re-ingest", wall_s=wall["unchanged"], cpu_s=cpu["unchanged"],
           vs_bare_query=wall["unchanged"] / wall["bare query"], target=1.5, **common)
    record("small trace: rlwh query select count(*) from cpu_ops", wall_s=wall["query"], cpu_s=cpu["query"],
           vs_bare_query=wall["query"] / wall["bare query"], target=1.5, **common)
