#!/usr/bin/env python3
"""Rename rlwh's private `_` objects of the main schema to their home in the schema
`internal` (migration 0010), in every file that names them. Re-runnable: a second run
changes nothing, so run it again after merging a branch that still says `_memory_timeline`.

    python tools/private_schema_rename.py          # rewrite the files, move sql/_x.sql
    python tools/private_schema_rename.py --check  # exit 1 and list what would change

What it renames:
- the fixed MAPPING below (the objects migration 0010 moves);
- every object a private view file defines (sql/_x.sql: a view or macro `_x` becomes
  `internal.x`), and the file itself moves to sql/internal/x.sql (named after its new
  name: sql/_snapshot_blocks.sql becomes sql/internal/snapshot_held_blocks.sql; a file of
  macros is named `_x` in `-- depends:` lines and becomes internal.x);
- every private table or sequence a migration creates (`create table _x`, not temp),
  as `internal.x`; it warns when migration 0010 does not move one of them.

Where: rlwh/ sql/ ingest/ reports/ tests/ bench/ docs/ and README.md; never migrations/
(0001-0009 are history, 0010 says the mapping itself), CHANGELOG.md (history), the
generated docs (python -m rlwh.docs), nor tests/old_warehouse.py and
tests/test_private_schema.py (they build and upgrade warehouses of the old names). A line
holding `before 0010` keeps its old names (a legacy name on purpose).
Names are replaced whole (`_stack_frames`, `main._stack_frames`; never inside
`_stack_frames_x` or `x_stack_frames`); a file path `sql/_x.sql` becomes
`sql/internal/x.sql`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "internal"
# Old name -> new name. Names that would read the same as a public object get their own.
MAPPING = {
    "_rlwh_migrations": "internal.migrations",
    "_rlwh_settings": "internal.settings",
    "_source_ids": "internal.source_ids",
    "_memory_record_ops": "internal.memory_record_ops",
    "_memory_timeline": "internal.memory_timeline_rows",  # the public view is memory_timeline
    "_torch_memory_blocks": "internal.torch_memory_blocks",
    "_stack_user_frames": "internal.stack_user_frames",
    "_memory_records_matched": "internal.memory_records_matched",
    "_stack_frames": "internal.stack_frames",
    "_torch_memory_pairs": "internal.torch_memory_pairs",
    # Branch snapshots (issue 21): its helper view of every block a snapshot held while
    # its trace ran; main has the table snapshot_blocks (the blocks at snapshot time).
    "_snapshot_blocks": "internal.snapshot_held_blocks",
}
FOLDERS = ("rlwh", "sql", "ingest", "reports", "tests", "bench", "docs")
FILES = ("README.md",)
SUFFIXES = {".py", ".sql", ".html", ".js", ".md", ".toml"}
# The files about the old names themselves.
SKIP = {"docs/SCHEMA.md", "docs/COMMANDS.md", "tests/old_warehouse.py", "tests/test_private_schema.py"}
KEEP_LINE = "before 0010"
MIGRATION_0010 = "0010_"

_DEFINES = re.compile(r"create\s+(?:or\s+replace\s+)?(?:view|macro|table\s+macro|function)\s+(_[a-z0-9_]+)\b", re.I)
_CREATES = re.compile(r"create\s+(?:table|sequence)\s+(?:if\s+not\s+exists\s+)?(_[a-z0-9_]+)\b", re.I)


def private_view_files() -> list[Path]:
    return sorted((ROOT / "sql").glob("_*.sql"))


def mapping() -> tuple[dict[str, str], list[str]]:
    """The whole mapping (fixed, then found) and warnings."""
    names = dict(MAPPING)
    warnings = []
    for path in private_view_files():
        for name in [*_DEFINES.findall(path.read_text(encoding="utf-8")), path.stem]:
            names.setdefault(name.lower(), f"{SCHEMA}.{name.lower()[1:]}")
    migrations = sorted((ROOT / "migrations").glob("*.sql"))
    moving = "\n".join(p.read_text(encoding="utf-8") for p in migrations if p.name.startswith(MIGRATION_0010))
    for path in migrations:
        if path.name >= MIGRATION_0010:
            continue
        for name in _CREATES.findall(path.read_text(encoding="utf-8")):
            name = name.lower()
            if name == "_rlwh_migrations":  # moved by rlwh.warehouse.schema before 0010 runs
                continue
            names.setdefault(name, f"{SCHEMA}.{name[1:]}")
            if not re.search(rf"drop\s+(?:table|sequence)\s+(?:if\s+exists\s+)?{name}\b", moving, re.I):
                warnings.append(f"{path.name} creates {name}, which migration 0010 does not move to {names[name]}")
    return names, warnings


def _patterns(names: dict[str, str]) -> list[tuple[re.Pattern, str]]:
    out = []
    for old, new in sorted(names.items(), key=lambda kv: -len(kv[0])):
        stem = new.split(".", 1)[1]
        out.append((re.compile(rf"\bsql/{re.escape(old)}\.sql\b"), f"sql/{SCHEMA}/{stem}.sql"))
        out.append((re.compile(rf"(?<![\w./]){re.escape(old)}\.sql\b"), f"{SCHEMA}/{stem}.sql"))
        out.append((re.compile(rf"(?<![\w.])(?:main\.)?{re.escape(old)}\b(?!\.sql)"), new))
    return out


def rewrite(text: str, patterns: list[tuple[re.Pattern, str]], names: dict[str, str]) -> str:
    if not any(old in text for old in names):  # most files: nothing to look at line by line
        return text
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if KEEP_LINE in line or not any(old in line for old in names):
            continue
        for pattern, new in patterns:
            line = pattern.sub(new, line)
        lines[i] = line
    return "".join(lines)


def candidate_files() -> list[Path]:
    paths = [ROOT / f for f in FILES]
    for folder in FOLDERS:
        paths += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return sorted(p for p in paths if p.is_file() and p.relative_to(ROOT).as_posix() not in SKIP
                  and "__pycache__" not in p.parts)


def moves(names: dict[str, str]) -> list[tuple[Path, Path]]:
    return [(p, ROOT / "sql" / SCHEMA / f"{names[p.stem].split('.', 1)[1]}.sql") for p in private_view_files()]


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(exist_ok=True)
    if dest.exists():
        raise SystemExit(f"cannot move {src.relative_to(ROOT)}: {dest.relative_to(ROOT)} exists (merge them by hand)")
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(src)], cwd=ROOT,
                             capture_output=True).returncode == 0
    if tracked:
        subprocess.run(["git", "mv", str(src), str(dest)], cwd=ROOT, check=True)
    else:
        src.rename(dest)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when something would change")
    args = parser.parse_args(argv)
    names, warnings = mapping()
    patterns = _patterns(names)
    pending = []
    for src, dest in moves(names):
        pending.append(f"move {src.relative_to(ROOT)} -> {dest.relative_to(ROOT)}")
        if not args.check:
            _move(src, dest)
    for path in candidate_files():
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, patterns, names)
        if new != text:
            changed = sum(a != b for a, b in zip(text.splitlines(), new.splitlines()))
            pending.append(f"rewrite {path.relative_to(ROOT)} ({changed} lines)")
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for line in pending:
        print(line)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    if not pending:
        print(f"nothing to rename ({len(names)} names known)")
    return 1 if (args.check and pending) or warnings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
