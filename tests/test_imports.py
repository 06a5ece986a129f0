"""Every rlwh module imports on its own, and no two modules import each other.

The graph is read from the source with ast, imports inside functions included: a lazy
import hides a cycle from the interpreter (it works until someone moves it to the top)
but not from a reader trying to see which way the layers depend.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

import rlwh

PACKAGE = Path(rlwh.__file__).parent


def modules() -> dict[str, Path]:
    """Every module of rlwh by dotted name, packages as their __init__.py."""
    found = {"rlwh": PACKAGE / "__init__.py"}
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="rlwh."):
        rel = Path(*info.name.split(".")[1:])
        found[info.name] = PACKAGE / rel / "__init__.py" if info.ispkg else PACKAGE / rel.with_suffix(".py")
    return found


def _resolve(name: str, level: int, here: str, is_package: bool) -> str:
    if level == 0:
        return name
    parts = here.split(".") if is_package else here.split(".")[:-1]
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The rlwh modules `name` imports anywhere in its source (`from pkg import mod` counts as pkg.mod)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, name, is_package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    return {t for t in targets if t in known and t != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle():
    found = modules()
    graph = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    # A package's own __init__ re-exporting its modules is the facade, not a cycle:
    # drop the edge from a submodule to the package that contains it.
    graph = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    here = {"rlwh.report", "rlwh.report.run", "rlwh.report.render", "rlwh.nightly"}
    source = "from rlwh.report import render\nfrom . import run\ndef f():\n    from rlwh import nightly\n"
    path = tmp_path / "__init__.py"
    path.write_text(source, encoding="utf-8")
    assert imports_of("rlwh.report", path, here) == {"rlwh.report.render", "rlwh.report.run", "rlwh.nightly"}


def test_nightly_and_report_depend_one_way():
    found = modules()
    report_modules = {n for n in found if n == "rlwh.report" or n.startswith("rlwh.report.")}
    for name in report_modules:
        assert "rlwh.nightly" not in imports_of(name, found[name], set(found)), name
    assert any(t in report_modules for t in imports_of("rlwh.nightly", found["rlwh.nightly"], set(found)))


def test_every_module_imports_in_a_fresh_interpreter():
    """Each module first in its own interpreter would cost ~60 starts; one interpreter that
    imports them in sorted order catches a module that fails to import at all."""
    names = sorted(modules())
    code = ("import importlib, sys\nfailed = []\nfor n in sys.argv[1:]:\n    try:\n"
            "        importlib.import_module(n)\n    except Exception as e:\n"
            "        failed.append(f'{n}: {type(e).__name__}: {e}')\nprint('\\n'.join(failed))\n"
            "sys.exit(1 if failed else 0)\n")
    result = subprocess.run([sys.executable, "-c", code, *names], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


# The floors of the package, lowest first: a module imports only from its own floor or
# those below it, so following `rlwh ingest` or `rlwh nightly` never climbs back up.
FLOORS = (
    ("rlwh", "rlwh.errors", "rlwh.sqltext", "rlwh.assets", "rlwh.stacks", "rlwh.safe_files", "rlwh.exitcodes",
     "rlwh.interrupts", "rlwh.child_process", "rlwh.process_db"),
    ("rlwh.config",),
    ("rlwh.readers", "rlwh.synth"),
    ("rlwh.executors",),
    ("rlwh.warehouse",),
    ("rlwh.parquet",),
    ("rlwh.ingest",),
    ("rlwh.report",),
    ("rlwh.nightly",),
    ("rlwh.cli", "rlwh.demo", "rlwh.api", "rlwh.__main__"),
    ("rlwh.docs",),
)


def floor_of(name: str) -> int:
    """The floor of a module: that of the longest listed prefix of its name."""
    best = max((len(room), i) for i, rooms in enumerate(FLOORS) for room in rooms
               if name == room or name.startswith(room + "."))
    return best[1]


# The package's module __getattr__ hands out the Python API's names on first use
# (`rlwh.ingest(...)`, `rlwh.connect(...)`): nothing below imports `rlwh` for them.
API_FACADE = {("rlwh", "rlwh.ingest"), ("rlwh", "rlwh.api")}


def test_imports_never_climb_back_up():
    found = modules()
    climbs = sorted(f"{name} (floor {floor_of(name)}) imports {target} (floor {floor_of(target)})"
                    for name, path in found.items() for target in imports_of(name, path, set(found))
                    if floor_of(target) > floor_of(name) and (name, target) not in API_FACADE)
    assert climbs == []


def test_every_module_has_a_floor():
    assert all(floor_of(name) >= 0 for name in modules())
    assert floor_of("rlwh.ingest.runner") > floor_of("rlwh.warehouse.session") > floor_of("rlwh.executors.run")


def test_storage_never_runs_analysis():
    """The warehouse's storage (sessions, migrations) never calls the derived tables' code:
    the writers that open it (ingest targets, the builder, init, forget) do."""
    found = modules()
    for name in ("rlwh.warehouse.session", "rlwh.warehouse.schema"):
        assert "rlwh.warehouse.derive" not in imports_of(name, found[name], set(found)), name


@pytest.mark.skipif(sys.platform != "linux", reason="the import check runs a fresh interpreter")
def test_commands_import_only_what_they_need():
    """The CLI, an ingest that finds nothing changed, and `rlwh query`'s modules load no
    pages (jinja2, plotly), no worker pool, no parser (pyarrow) and no Ray: each costs a
    small command ~0.1-0.2 s."""
    code = ("import sys, rlwh.cli, rlwh.ingest.runner, rlwh.report.terminal, rlwh.warehouse.catalog; "
            "print(' '.join(m for m in ('plotly', 'jinja2', 'concurrent.futures.process', 'rlwh.report.build', "
            "'rlwh.parquet.dataset', 'rlwh.ingest.to_warehouse', 'rlwh.ingest.landing', 'pyarrow', 'ray') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_the_report_package_re_exports_every_name_it_lists():
    import rlwh.report as report

    assert sorted(report.__all__) == sorted(report._EXPORTS)
    for name in report.__all__:
        assert getattr(report, name) is getattr(importlib.import_module(f"rlwh.report.{report._EXPORTS[name]}"), name)
    with pytest.raises(AttributeError):
        getattr(report, "no_such_name")  # noqa: B009
