"""Every public view (sql/<view>.sql, not starting with _) has its own tests/sql/test_<view>.py,
where its rows are checked against an oracle computed in Python from the inserted rows."""

from __future__ import annotations

from conftest import REPO


def test_every_public_view_has_its_own_test_file():
    views = sorted(p.stem for p in (REPO / "sql").glob("*.sql") if not p.stem.startswith("_"))
    missing = [v for v in views if not (REPO / "tests" / "sql" / f"test_{v}.py").is_file()]
    assert views and missing == [], f"public views without tests/sql/test_<view>.py: {missing}"
