"""Every command and query in README.md runs as written on the demo, and returns rows.

The README promises that its commands work from the checkout after `make demo`. This
test keeps the promise true: it builds the demo once (rlwh.demo, as `make demo` does)
in a temp folder laid out like the checkout (`demo/`, `warehouse.toml`, and `.venv/bin`
holding `rlwh` and `duckdb` of the environment under test), runs each ```sh block of the
README there with bash (`make` lines aside: they are the setup itself), and runs each
statement of each ```sql block through `rlwh query` on the demo's warehouse.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
def demo_made(tmp_path_factory) -> tuple[Path, str]:
    """`make demo` once for this file (rlwh.demo.run_demo): (its `demo/` folder, what it
    printed). The checkouts below hold copies of it; read it, never change it."""
    demo = tmp_path_factory.mktemp("readme-demo") / "demo"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run_demo(demo) == 0
    return demo, printed.getvalue()


def _checkout_after_make_demo(root: Path, demo: Path) -> Path:
    """`root` shaped like the checkout after `make demo`: a copy of the demo (times kept, so
    its files are as unchanged to an ingest as the demo's own), warehouse.toml, and .venv/bin
    holding `rlwh` and `duckdb` of the environment under test."""
    shutil.copytree(demo, root / "demo", symlinks=True)
    shutil.copy(REPO / "warehouse.toml", root / "warehouse.toml")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    rlwh = bin_dir / "rlwh"
    rlwh.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rlwh.cli "$@"\n', encoding="utf-8")
    rlwh.chmod(0o755)
    (bin_dir / "duckdb").symlink_to(Path(sys.executable).parent / "duckdb")
    return root


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, demo_made) -> Path:
    """A folder shaped like the checkout after `make demo`."""
    return _checkout_after_make_demo(tmp_path_factory.mktemp("readme"), demo_made[0])


SH_BLOCKS = [b for b in _blocks("sh") if _commands(b).strip()]


def test_the_readme_has_commands_and_queries_to_check():
    assert len(SH_BLOCKS) >= 2 and _blocks("sql")
    assert all("/shared/" not in b for b in SH_BLOCKS), "a ```sh block needs data the demo does not have"


@pytest.mark.parametrize("index", range(len(SH_BLOCKS)), ids=[f"sh{i}" for i in range(len(SH_BLOCKS))])
def test_every_sh_block_runs_on_the_demo(readme_in_order, index):
    """Each block as bash ran it in the README's order (readme_in_order), stdout and stderr."""
    block, done = [(body, result) for lang, body, result in readme_in_order if lang == "sh"][index]
    assert block == SH_BLOCKS[index]
    output = done.stdout
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
def test_every_readme_query_returns_rows_on_the_demo(checkout, readme_in_order, sql):
    """On the demo as the README's blocks left it (readme_in_order ran them all)."""
    result = CliRunner().invoke(cli, ["query", sql, "--db", str(checkout / "demo" / "warehouse.duckdb"),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output), f"no rows on the demo: {sql}"


PYTHON_BLOCKS = _blocks("python")


def test_the_readme_has_a_python_example():
    assert PYTHON_BLOCKS and all("rlwh." in b for b in PYTHON_BLOCKS)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"python{i}" for i in range(len(PYTHON_BLOCKS))])
def test_every_python_block_runs_on_the_demo(checkout, readme_in_order, block):
    """As a plain script (no main guard), from the checkout after `make demo` (and after the
    README's blocks, readme_in_order, which must not see what this script changes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", block], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"\d+ files, [\d,]+ rows, 0 failed", lines[0]), lines[:1]
    assert lines[1].split() == ["run", "role", "rank_id", "peak_live_mb"], lines[1:2]
    assert len(lines) == 2 + 5 and all(line.split()[1] == "demo-run" for line in lines[2:]), done.stdout


SCREEN = 50  # lines: what a README query may print


def _blocks_in_order() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(README.read_text(encoding="utf-8"))
            if lang in ("sh", "sql") and (lang == "sql" or _commands(body).strip())]


def _traced_outputs(output: str) -> list[tuple[str, list[str]]]:
    """bash -x output, stdout and stderr merged: (command, the lines it printed) per command."""
    found: list[tuple[str, list[str]]] = []
    for line in output.splitlines():
        if line.startswith("+ ") and found and not found[-1][1]:  # a pipeline: its commands trace together
            found[-1] = (found[-1][0] + " | " + line[2:], [])
        elif line.startswith("+ "):
            found.append((line[2:], []))
        elif found:
            found[-1][1].append(line)
    return found


def _header(lines: list[str]) -> list[str]:
    return lines[0].split() if lines else []


@pytest.fixture(scope="module")
def readme_in_order(checkout) -> list[tuple[str, str, Any]]:
    """Every block in the README's order, as a reader pastes them, on the checkout (once for
    the tests of this file: the blocks change the warehouse): (language, block, result) per
    ```sh block (bash's CompletedProcess, stderr merged into stdout) and per statement of a
    ```sql block (what `rlwh query` printed: the CliRunner result)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")} | {"PYTHONPATH": str(REPO)}
    db = checkout / "demo" / "warehouse.duckdb"
    ran: list[tuple[str, str, Any]] = []
    for lang, body in _blocks_in_order():
        if lang == "sh":
            done = subprocess.run(["bash", "-euxo", "pipefail", "-c", _commands(body)], cwd=checkout, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                                  stdin=subprocess.DEVNULL)
            ran.append((lang, body, done))
            continue
        con = duckdb.connect()
        statements = [st.query.strip() for st in con.extract_statements(body)]
        con.close()
        for sql in statements:
            ran.append((lang, sql, CliRunner().invoke(cli, ["query", sql, "--db", str(db)])))
    return ran


def test_the_readme_in_order_prints_a_screenful_per_query_naming_the_run(readme_in_order):
    """Every block in the README's order (readme_in_order): each query (an `rlwh query` line
    or a ```sql statement) prints at most a screenful and shows the run of each row, so two
    loaded runs never print as the same rows twice."""
    queries = 0
    for lang, body, done in readme_in_order:
        if lang == "sh":
            assert done.returncode == 0, done.stdout[-4000:]
            for command, lines in _traced_outputs(done.stdout):
                if "rlwh query" in command:
                    queries += 1
                    assert len(lines) <= SCREEN, f"{command}: {len(lines)} lines"
                    assert "run" in _header(lines), f"{command}: no run column: {lines[:2]}"
            continue
        sql, result = body, done
        queries += 1
        assert result.exit_code == 0, result.output
        lines = result.output.rstrip("\n").splitlines()
        assert len(lines) <= SCREEN, f"{sql.splitlines()[-1]}: {len(lines)} lines"
        assert "run" in _header(lines), f"{sql}: no run column: {lines[:2]}"
    assert queries >= 15


def test_every_table_the_demo_prints_comes_with_a_query_that_gives_it(demo_made):
    """A newcomer copies from the demo's output: each table is printed under the query that
    made it, and that query, pasted into `rlwh query`, prints the same columns."""
    demo, out = demo_made
    sections = re.findall(r"\n([^\n]+):\n((?:  [^\n]*\n)+)(\S[^\n]*)\n", out)
    assert len(sections) >= 4
    for title, indented, header in sections:
        sql = "\n".join(line[2:] for line in indented.splitlines())
        db = demo / "warehouse.duckdb"
        done = subprocess.run([sys.executable, "-m", "rlwh.cli", "query", "--db", str(db), "--format", "csv", sql],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{title}: {done.stderr}"
        assert done.stdout.splitlines()[0].split(",") == header.split(), title
