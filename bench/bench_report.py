"""Report rendering at scale: one rank with 1,000,000 allocations.

The rows are generated straight into the base tables with DuckDB SQL (no profile files
to parse), so the figure measured is rendering alone: the view queries, the reduction
and the HTML. Called from bench/run.py; `python bench/bench_report.py [DIR]` runs it alone.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rlwh import report  # noqa: E402
from rlwh.config import Config  # noqa: E402
from rlwh.report import run as report_run  # noqa: E402
from rlwh.warehouse import derive  # noqa: E402
from rlwh.warehouse.schema import migrate  # noqa: E402
from rlwh.warehouse.storage import connect_writable  # noqa: E402

RUN, ROLE, CAPTURE = "bench-report", "actor_update", "20260101_000000_ascend_pt"
T0_NS = 1_767_225_600_000_000_000

# Stacks: 4,000 distinct, 25 frames each from a pool of 2,000 frames; 27% of ops carry one.
# Blocks live 0-5 ms (about 2,500 live at any time); every 997th is never released, and
# every 50,000th is a 1 GiB block held for 20 ms: the peaks the reduction must keep.
FILL_SQL = """
insert into runs values ($run, '/bench/' || $run, now()::timestamp, now()::timestamp);
insert into sources (source_id, run, role, rank_id, capture, kind, path, bytes, status, rows, ingested_at)
values (1, $run, $role, 0, $capture, 'ascend_memory_csv', $capture || '/operator_memory.csv', 0, 'ok', $n,
        now()::timestamp);
insert into call_stacks
select s + 7000000 as stack_id,
       string_agg('model/layer_' || ((s * 31 + j * 17) % 2000) || '.py(' || (100 + j) || '): forward_'
                  || ((s * 31 + j * 17) % 2000), chr(10) order by j) as stack,
       first('model/layer_' || ((s * 31) % 2000) || '.py(100): forward_' || ((s * 31) % 2000) order by j),
       25
from range(4000) t(s), range(25) f(j)
group by s;
insert into memory_records (run, role, rank_id, capture, source_id, source_row, name, size_bytes, alloc_ns,
                            release_ns, alloc_total_allocated_bytes, alloc_total_reserved_bytes,
                            release_total_allocated_bytes, release_total_reserved_bytes, device)
select $run, $role, 0, $capture, 1, i + 1, 'aten::op_' || (i % 40),
       case when i % 50000 = 0 then 1073741824 else 512 * (1 + (i * 7919) % 8192) end,
       $t0 + i * 1000,
       case when i % 997 = 0 then null
            when i % 50000 = 0 then $t0 + i * 1000 + 20000000
            else $t0 + i * 1000 + ((i * 104729) % 5000) * 1000 end,
       20e9::bigint + (i % 5000) * 1048576, 24e9::bigint + (i % 1000) * 2097152,
       20e9::bigint + (i % 4000) * 1048576, 24e9::bigint + (i % 1000) * 2097152,
       'NPU:0'
from range($n) t(i);
insert into cpu_ops (run, role, rank_id, capture, source_id, name, ts_ns, dur_ns, pid, tid, stack_id)
select $run, $role, 0, $capture, 1, 'aten::op_' || (i % 40), $t0 + i * 1000 - 300, 600, 1, 1,
       case when (i * 2654435761) % 100 < 27 then 7000000 + (i * 7) % 4000 end
from range($n) t(i);
insert into ranges (run, role, rank_id, capture, source_id, source, domain, name, start_ns, end_ns, pid, tid)
values ($run, $role, 0, $capture, 1, 'mstx', 'default', $role, $t0, $t0 + $n * 1000, 1, 1);
"""


def build_warehouse(path: Path, allocations: int = 1_000_000) -> None:
    """A migrated warehouse holding one rank with `allocations` allocations."""
    con = connect_writable(path)
    try:
        con.execute("set threads = 2")
        migrate(con)
        params = {"run": RUN, "role": ROLE, "capture": CAPTURE, "t0": T0_NS, "n": allocations}
        for statement in [s for s in FILL_SQL.split(";\n") if s.strip()]:
            used = {k: v for k, v in params.items() if "$" + k in statement}
            con.execute(statement, used)
        derive.refresh_all(con)  # what rlwh ingest does after loading
        con.execute("checkpoint")
    finally:
        con.close()


class _Timed:
    """Wraps a function and adds up the seconds spent in it."""

    def __init__(self, func):
        self.func, self.seconds = func, 0.0

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.func(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started


def bench_report(tmp: Path, allocations: int = 1_000_000) -> list[dict]:
    """Render the reports of a 1 M-allocation rank: time, where it goes, and page sizes."""
    tmp.mkdir(parents=True, exist_ok=True)
    db = tmp / "report_bench.duckdb"
    db.unlink(missing_ok=True)
    started = time.perf_counter()
    build_warehouse(db, allocations)
    build_s = time.perf_counter() - started
    config = Config(db_path=db, reports_dir=tmp / "report_out", memory_limit="1GB", threads=2)
    skew, panels = _Timed(report.ReportSession.skew), _Timed(report_run.memory_panels)
    report.ReportSession.skew = lambda self, run: skew(self, run)
    report_run.memory_panels = panels
    try:
        started = time.perf_counter()
        pages = report.build_report(config, out=tmp / "report_out", run=RUN)
        render_s = time.perf_counter() - started
    finally:
        report.ReportSession.skew, report_run.memory_panels = skew.func, panels.func
    results = [
        {"name": "report_build_warehouse", "allocations": allocations, "wall_s": round(build_s, 2)},
        {"name": "report_render_run", "allocations": allocations, "pages": len(pages), "wall_s": round(render_s, 2),
         "rank_skew_view_s": round(skew.seconds, 2), "memory_timeline_page_queries_s": round(panels.seconds, 2)},
    ]
    for page in pages:
        size = page.stat().st_size
        results.append({"name": f"report_page_{page.relative_to(tmp / 'report_out')}", "bytes": size,
                         "mb": round(size / 1e6, 2)})
    return results


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="rlwh-bench-report-"))
    for row in bench_report(where):
        print(row)
