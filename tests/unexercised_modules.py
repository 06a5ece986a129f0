"""List the rlwh modules the fast tests leave unexercised; exit 1 when there is one.

Run by `make coverage` after `coverage run -m pytest -m "not slow"` and `coverage combine`.
Importing a module runs its def and class lines, so a module counts as exercised only when
a line inside one of its functions ran (a module without functions: when it was imported).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import coverage

REPO = Path(__file__).resolve().parent.parent


def body_lines(source: str) -> set[int]:
    """Line numbers of the statements inside function bodies (what only a call runs)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for statement in node.body:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.stmt):
                        lines.add(inner.lineno)
    return lines


def main() -> int:
    cov = coverage.Coverage()
    cov.load()
    data = cov.get_data()
    measured = {Path(f).resolve(): set(data.lines(f) or ()) for f in data.measured_files()}
    rows, unexercised = [], []
    for path in sorted((REPO / "rlwh").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        ran, body = measured.get(path.resolve(), set()), body_lines(source)
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        has_code = any(isinstance(n, ast.stmt) for n in ast.parse(source).body)
        if not has_code:
            continue
        exercised = bool(ran & body) if body else bool(ran)
        rows.append((len(ran & body) / len(body) if body else float(bool(ran)), module, len(ran & body), len(body)))
        if not exercised:
            unexercised.append(module)
    print("function-body lines run by the fast tests, lowest first:")
    for share, module, run, total in sorted(rows)[:12]:
        print(f"  {share:6.1%}  {run:5d}/{total:<5d}  {module}")
    if unexercised:
        print(f"modules no fast test exercises: {', '.join(unexercised)}")
        return 1
    print(f"every one of {len(rows)} rlwh modules is exercised by the fast tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
