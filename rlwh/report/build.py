"""`rlwh report`: every page of one run (or all) and the runs index, into one dir.

plotly.min.js and report.js are written once at the top of the dir and every page links
them relatively, so the dir works from file:// on an air-gapped cluster.
"""

from __future__ import annotations

from pathlib import Path

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.report import queries as Q
from rlwh.report import render
from rlwh.report.context import ReportSession
from rlwh.report.index import write_index
from rlwh.report.nightly_state import load_state
from rlwh.report.run import render_run
from rlwh.warehouse.session import connect_read


def build_report(config: Config, out: Path | None = None, run: str | None = None) -> list[Path]:
    """Render the pages of `run` (every run when None) into `out`; returns the pages written.

    The index keeps what the last `rlwh nightly` into this dir found (its nightly.json).
    """
    out = Path(out or config.reports_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = connect_read(config)
    try:
        s = ReportSession(con, config.usage_component)
        runs = s.rows(Q.RUNS)
        if run is not None:
            runs = [r for r in runs if r["run"] == run]
            if not runs:
                raise RlwhError(f"no run named {run!r} in {config.db_path}: see `rlwh runs`")
        render.write_assets(out)
        written: list[Path] = []
        for r in runs:
            written.extend(render_run(s, r, out, config.train_metrics))
        written.append(write_index(s, out / "index.html", out, load_state(out / "index.html")))
        return written
    finally:
        con.close()
