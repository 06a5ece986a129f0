"""A wheel built from the project carries sql/, ingest/, migrations/ and reports/: it is
installed into a fresh venv outside the checkout and runs an ingest there."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO, copy_fixture


@pytest.mark.slow
def test_wheel_installs_and_ingests_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel = next(dist.glob("rlwh-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # Dependencies come from this venv's site-packages (no network needed), added by a
    # plain path line: .pth files there (the editable install of the checkout) are not run.
    purelib = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                           text=True).strip())
    (purelib / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)], check=True)
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RLWH_DB", "RLWH_CONFIG")}
    where = subprocess.run([str(py), "-c", "import rlwh.assets as a; print(a.asset_dir('sql'))"],
                           cwd=work, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert str(venv) in where.stdout and "_assets" in where.stdout  # not the checkout's sql/
    rlwh = venv / "bin" / "rlwh"
    ingest = subprocess.run([str(rlwh), "ingest", str(profile), "--db", str(work / "w.duckdb")],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert ingest.returncode == 0, ingest.stdout + ingest.stderr
    assert "0 failed" in ingest.stdout
    peak = subprocess.run([str(rlwh), "query", "select count(*) from memory_peak_breakdown", "--db",
                           str(work / "w.duckdb"), "--format", "csv"], cwd=work, env=env, capture_output=True,
                          text=True)
    assert peak.returncode == 0 and int(peak.stdout.splitlines()[1]) > 0
    report = subprocess.run([str(rlwh), "report", "--db", str(work / "w.duckdb"), "--out", str(work / "site")],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr
    assert (work / "site" / "index.html").exists() and (work / "site" / "report.js").exists()
