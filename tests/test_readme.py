"""Every command and query in README.md runs as written on the demo, and returns rows.

The README promises that its commands work from the checkout after `make demo`. This
test keeps the promise true: it builds the demo once (rlwh.demo, as `make demo` does)
in a temp folder laid out like the checkout (`demo/`, `warehouse.toml`, and `.venv/bin`
holding `rlwh` and `duckdb` of the environment under test), runs each ```sh block of the
README there with bash (`make` lines aside: they are the setup itself), and runs each
statement of each ```sql block through `rlwh query` on the demo's warehouse.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from rlwh.cli import cli
from rlwh.demo import run_demo

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text(encoding="utf-8")) if lang == language]


def _commands(block: str) -> str:
    """The block without its `make` lines (the setup the README starts with)."""
    return "\n".join(line for line in block.splitlines() if not line.strip().startswith("make "))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A folder shaped like the checkout after `make demo`."""
    root = tmp_path_factory.mktemp("readme")
    assert run_demo(root / "demo") == 0
    shutil.copy(REPO / "warehouse.toml", root / "warehouse.toml")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    rlwh = bin_dir / "rlwh"
    rlwh.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rlwh.cli "$@"\n', encoding="utf-8")
    rlwh.chmod(0o755)
    (bin_dir / "duckdb").symlink_to(Path(sys.executable).parent / "duckdb")
    return root


SH_BLOCKS = [b for b in _blocks("sh") if _commands(b).strip()]


def test_the_readme_has_commands_and_queries_to_check():
    assert len(SH_BLOCKS) >= 2 and _blocks("sql")
    assert all("/shared/" not in b for b in SH_BLOCKS), "a ```sh block needs data the demo does not have"


@pytest.mark.parametrize("block", SH_BLOCKS, ids=[f"sh{i}" for i in range(len(SH_BLOCKS))])
def test_every_sh_block_runs_on_the_demo(checkout, block):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(["bash", "-euxo", "pipefail", "-c", _commands(block)], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Traceback" not in output and "Error:" not in output, output[-4000:]
    assert "(0 rows)" not in output, f"a README command returns no rows on the demo:\n{output[-4000:]}"


def _statements() -> list[str]:
    con = duckdb.connect()
    try:
        return [s.query.strip() for block in _blocks("sql") for s in con.extract_statements(block)]
    finally:
        con.close()


@pytest.mark.parametrize("sql", _statements(), ids=lambda sql: sql.splitlines()[0][:40])
def test_every_readme_query_returns_rows_on_the_demo(checkout, sql):
    result = CliRunner().invoke(cli, ["query", sql, "--db", str(checkout / "demo" / "warehouse.duckdb"),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output), f"no rows on the demo: {sql}"


PYTHON_BLOCKS = _blocks("python")


def test_the_readme_has_a_python_example():
    assert PYTHON_BLOCKS and all("rlwh." in b for b in PYTHON_BLOCKS)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"python{i}" for i in range(len(PYTHON_BLOCKS))])
def test_every_python_block_runs_on_the_demo(checkout, block):
    """As a plain script (no main guard), from the checkout after `make demo`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", block], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"\d+ files, [\d,]+ rows, 0 failed", lines[0]), lines[:1]
    assert lines[1].split() == ["run", "role", "rank_id", "peak_live_mb"], lines[1:2]
    assert len(lines) == 2 + 5 and all(line.split()[1] == "demo-run" for line in lines[2:]), done.stdout
