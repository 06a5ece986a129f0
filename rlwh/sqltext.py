"""Quoting for the few places where DuckDB takes no parameter (COPY ... TO, COMMENT ON,
table functions over our own temp files): every value from data goes as a parameter;
and the sections of an ingest job's SQL."""

from __future__ import annotations

import os
import re


def sql_literal(value: str | os.PathLike) -> str:
    """A SQL string literal: the text in single quotes, quotes doubled."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    """A quoted SQL identifier (a table or column name read from the catalog)."""
    return '"' + name.replace('"', '""') + '"'


_SECTION = re.compile(r"^-- (fields|read [a-z_]+|land):\s*$")


def job_sections(text: str) -> dict[str, str]:
    """An ingest job's SQL by section. A line `-- fields:`, `-- read <table>:` or `-- land:`
    starts a section; the text before the first one (the job's header) belongs to 'land',
    so a job without sections is all landing SQL."""
    sections: dict[str, list[str]] = {"land": []}
    current = "land"
    for line in text.splitlines():
        match = _SECTION.match(line)
        if match:
            current = match.group(1)
            sections.setdefault(current, [])
        else:
            sections[current].append(line)
    return {name: "\n".join(lines).strip() + "\n" for name, lines in sections.items()}
