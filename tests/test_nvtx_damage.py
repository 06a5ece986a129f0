"""An NVTX jsonl export with a BOM, or whose first record (the string that names a range)
is damaged, gets a verdict that names what is wrong, never a constraint error: a BOM is
skipped, and a range whose name is lost is skipped with its line named (issue 40 item 4).
The damage is written into a copy of a real export here."""

from __future__ import annotations

from pathlib import Path

import duckdb
from click.testing import CliRunner

from rlwh.cli import cli
from rlwh.ingest.runner import ingest

EXPORT = Path(__file__).resolve().parent / "data/rl-insight-samples/nvtx_data/nvtx_profile/worker_process_70000.2.jsonl"


def _load(tmp_path: Path, config, run: str, data: bytes) -> tuple[str, int, str | None, list]:
    folder = tmp_path / run / "nvtx"
    folder.mkdir(parents=True)
    (folder / EXPORT.name).write_bytes(data)
    ingest(tmp_path / run, config, run=run)
    con = duckdb.connect(str(config.db_path), read_only=True)
    try:
        source = con.execute("select status, rows, message from sources where run = ?", [run]).fetchone()
        ranges = con.execute("select role, name, start_ns, end_ns from ranges where run = ? order by all",
                             [run]).fetchall()
    finally:
        con.close()
    return (*source, ranges)


def test_a_bom_is_skipped(tmp_path, config):
    plain = _load(tmp_path, config, "plain", EXPORT.read_bytes())
    bom = _load(tmp_path, config, "bom", b"\xef\xbb\xbf" + EXPORT.read_bytes())
    assert bom == plain and plain[0] == "ok" and plain[3]
    # The range's name is its phase (line 1 of the export); its role is its folder's.
    assert plain[3][0][:2] == ("nvtx", "compute_values")


def test_a_damaged_first_record_names_the_line_it_costs(tmp_path, config):
    lines = EXPORT.read_bytes().splitlines(keepends=True)
    damaged = b'{"id":107,"table":"StringIds","value":["compute_values"' + b"\n" + b"".join(lines[1:])
    status, rows, message, ranges = _load(tmp_path, config, "damaged", damaged)
    assert status in ("partial", "failed") and ranges == []
    assert "line 1" in message and "line 3" in message and "Constraint" not in message, message
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "damaged")])
    assert "Constraint" not in result.output
