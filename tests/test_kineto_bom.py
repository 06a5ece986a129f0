"""A UTF-8 BOM before a PyTorch trace is skipped, as the CSV and log readers skip one: the
trace loads the rows of the same trace without it, plain or gzipped, and check agrees
(issue 40 item 4). The BOM is written here before a real trace."""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from rlwh.cli import cli
from rlwh.ingest.runner import ingest

TRACE = Path(__file__).resolve().parent / "data/torch_profile/actor_update/prof_rank-0.pt.trace.json.gz"
TABLES = ("cpu_ops", "torch_memory_events", "device_ops", "ranges")


def _counts(db: Path, *runs: str) -> dict[str, dict[str, int]]:
    """Rows per table of each run, read on one connection (an open costs ~25 ms)."""
    with duckdb.connect(str(db), read_only=True) as con:
        return {run: {t: con.execute(f"select count(*) from {t} where run = ?", [run]).fetchone()[0] for t in TABLES}
                for run in runs}


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_bom_before_a_trace_is_skipped(tmp_path, config, gzipped):
    body = gzip.decompress(TRACE.read_bytes())
    for run, data in (("plain", body), ("bom", b"\xef\xbb\xbf" + body)):
        folder = tmp_path / run / "actor_update"
        folder.mkdir(parents=True)
        name = "prof_rank-0.pt.trace.json" + (".gz" if gzipped else "")
        (folder / name).write_bytes(gzip.compress(data) if gzipped else data)
        assert ingest(tmp_path / run, config, run=run).failed == 0
    counts = _counts(config.db_path, "bom", "plain")
    assert counts["bom"] == counts["plain"] and counts["bom"]["cpu_ops"] > 0
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "bom")])
    assert result.exit_code == 0 and "would fail" in result.output and "0 would fail" in result.output, result.output
