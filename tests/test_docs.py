"""Every command has help with an example and a README mention; docs/ is current."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from rlwh.cli import cli
from rlwh.docs import generated

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _commands():
    with click.Context(cli) as ctx:
        return [(name, cli.get_command(ctx, name)) for name in cli.list_commands(ctx)]


@pytest.mark.parametrize("name,command", _commands())
def test_command_has_help_with_example(name, command):
    assert command.help and len(command.help.splitlines()[0]) > 10
    assert "Example:" in command.help and f"rlwh {name}" in command.help


@pytest.mark.parametrize("name,command", _commands())
def test_command_is_in_readme(name, command):
    assert f"rlwh {name}" in README


def test_generated_docs_are_current():
    stale = [p.name for p, text in generated().items() if not p.exists() or p.read_text() != text]
    assert stale == [], f"run `make docs`: {stale} are stale"


def test_schema_md_lists_what_a_bi_tool_lists(fresh_db):
    """SCHEMA.md documents exactly main's tables and views (what BI tools and
    ../shared/tools/contract_check.py read); nothing of the private schema internal."""
    text = generated()[Path(__file__).resolve().parent.parent / "docs" / "SCHEMA.md"]
    listed = re.findall(r"^### (\S+)$", text, flags=re.MULTILINE)
    main = [r[0] for r in fresh_db.execute(
        """select table_name from duckdb_tables() where schema_name = 'main' and database_name = current_database()
           union all select view_name from duckdb_views()
           where schema_name = 'main' and database_name = current_database() and not internal""").fetchall()]
    assert sorted(listed) == sorted(main) and len(listed) == len(set(listed))
    depends = {d for line in re.findall(r"^Depends on: (.*)$", text, flags=re.MULTILINE) for d in line.split(", ")}
    assert depends and depends <= set(main)
