"""`bench/run.py --only expert_dumps`: a run of many small MoE expert-count dumps.

VeRL with msprobe writes one group_list.pt per grouped-matmul call: steps x roles x ranks x
layers files of a few hundred bytes each. `rlwh ingest` of such a run (a new warehouse,
the configured workers) against a bare load of the same files: each dump decoded by the
same pickle decoder (rlwh.readers.torch_pickle, no torch here), one pyarrow table of all
rows, a new DuckDB file holding it. Each command is a fresh process, the two interleaved
so a busy machine slows both alike; medians of wall (and CPU) seconds.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from measure import measure

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
REPEATS = 3

BARE_LOAD = """
import sys
from pathlib import Path
import duckdb, pyarrow as pa
from rlwh.readers.torch_pickle import load_int_array
files, experts, tokens = [], [], []
for path in sorted(Path(sys.argv[1]).rglob("*group_list.pt")):
    values = load_int_array(path)[0]
    files += [str(path)] * len(values)
    experts += range(len(values))
    tokens += values
rows = pa.table({"file": files, "expert": experts, "tokens": tokens})
con = duckdb.connect(sys.argv[2])
con.execute("create table gmm as select * from rows")
con.close()
"""


def _run(argv: list[str]) -> tuple[float, float]:
    m = measure(argv)
    if m.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{m.stdout}\n{m.stderr}")
    return m.wall_s, m.cpu_s


def bench_expert_dumps(tmp: Path, scale: float, record) -> None:
    from rlwh.synth.timelines import write_gmm_dumps

    steps = max(1, round(10 * scale))
    profile = tmp / "expert_dumps" / "run"
    files = write_gmm_dumps(profile, steps=steps, ranks=8, layers=8, ops_per_layer=2)
    db, bare_db = tmp / "expert_dumps.duckdb", tmp / "expert_dumps_bare.duckdb"
    times: dict[str, list[tuple[float, float]]] = {"bare": [], "rlwh": []}
    for _ in range(REPEATS):
        for path in (db, bare_db, db.with_name(db.name + ".wal")):
            path.unlink(missing_ok=True)
        times["bare"].append(_run([PY, "-c", BARE_LOAD, str(profile), str(bare_db)]))
        times["rlwh"].append(_run([PY, "-m", "rlwh", "ingest", str(profile), "-q", "--db", str(db),
                                   "--config", str(REPO / "warehouse.toml")]))
    wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    common = {"files": len(files), "repeats": REPEATS, "load_1min": os.getloadavg()[0]}
    record(f"{len(files)} expert-count dumps: bare load (decode each, one pyarrow table, new DuckDB file)",
           wall_s=wall["bare"], cpu_s=cpu["bare"], **common)
    record(f"{len(files)} expert-count dumps: rlwh ingest into a new warehouse", wall_s=wall["rlwh"],
           cpu_s=cpu["rlwh"], vs_bare_load=wall["rlwh"] / wall["bare"], **common)
