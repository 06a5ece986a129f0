"""Every command has help with an example and a README mention; docs/ is current."""

from __future__ import annotations

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
