"""rlwh.readers.verl_log and the verl_log ingest job: VeRL console logs -> train_metrics.

Every real log in ../shared/fixtures/real/verl-logs is parsed here a second time by a
plain regex pass (`oracle`), written in the test from the file's bytes: the rows ingest
loads must be exactly those.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, read_db

from rlwh.ingest.discover import discover
from rlwh.ingest.runner import ingest

LOGS = FIXTURES / "real" / "verl-logs"
REAL_LOGS = sorted(LOGS.rglob("output.log"))
_ORACLE_FIELD = re.compile(r"(.+):(?:np\.\w+\(([^()]*)\)|([-+0-9.eEnaif]+))")


def oracle(path: Path) -> tuple[list[tuple], list[int]]:
    """(rows (line, step, metric, value), lines of cut records) by a plain regex pass:
    a record is a line starting `step:N - `; a line at 4,096 characters lost its end,
    so its last field is not trusted."""
    rows, cut = [], []
    text = path.read_bytes().decode("utf-8")
    for number, line in enumerate(text.split("\n"), start=1):
        head = re.match(r"step:(\d+) - ", line)
        if not head:
            continue
        fields = line[head.end():].split(" - ")
        if len(line) >= 4096:
            fields = fields[:-1]
            cut.append(number)
        for f in fields:
            m = _ORACLE_FIELD.fullmatch(f)
            assert m, f"{path}:{number}: oracle cannot read {f!r}"
            rows.append((number, int(head.group(1)), m.group(1), float(m.group(2) or m.group(3))))
    return rows, cut


def same_value(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.fixture(scope="module")
def real_warehouse(tmp_path_factory):
    """Every real log ingested as one run (the fixture folder is the profile dir)."""
    from rlwh.config import Config

    tmp = tmp_path_factory.mktemp("verl_real")
    config = Config(db_path=tmp / "w.duckdb", workers=1, lock_timeout=5)
    summary = ingest(LOGS, config, run="real")
    return config, summary


def test_every_real_log_is_found_by_its_content():
    assert len(REAL_LOGS) == 7
    found = {f.rel_path: f for f in discover(LOGS).files}
    for path in REAL_LOGS:
        f = found[path.relative_to(LOGS).as_posix()]
        assert f.kind == "verl_log"
        assert f.capture == f.rel_path
        assert f.rank_id is None and f.step is None
        assert f.role not in ("wandb", "files") and not (f.role or "").startswith("run-")


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.relative_to(LOGS).parts[0] + "/" + p.parts[-3][-8:])
def test_rows_equal_a_plain_regex_parse(real_warehouse, path):
    config, _ = real_warehouse
    expected, cut = oracle(path)
    rel = path.relative_to(LOGS).as_posix()
    con = read_db(config)
    got = con.execute("select line, step, metric, value from train_metrics where capture = ? order by line, rowid",
                      [rel]).fetchall()
    status, message = con.execute("select status, message from sources where path = ?", [rel]).fetchone()
    con.close()
    assert [r[:3] for r in got] == [r[:3] for r in expected]  # steps, keys per step, file order
    assert all(same_value(g[3], e[3]) for g, e in zip(got, expected))
    assert {r[1] for r in got} == {r[1] for r in expected}
    if cut:
        assert status == "partial"
        assert f"{len(cut)} of " in message and f"line(s) {cut[0]}, {cut[1]}" in message
    else:
        assert (status, message) == ("ok", None)


def test_real_figures_from_the_fixture_readme(real_warehouse):
    """The README's counts (records / steps / keys), here from the oracle, for the odd cases:
    step 372 printed twice, 18 records cut at 4,096 characters, step 0 validation only."""
    sft = next(p for p in REAL_LOGS if "zc9o03i0" in str(p))
    rows, _ = oracle(sft)
    assert len({r[0] for r in rows}) == 373 and len({r[1] for r in rows}) == 372
    distill = next(p for p in REAL_LOGS if "ry3hgbx5" in str(p))
    rows, cut = oracle(distill)
    assert len(cut) == 18
    assert all(m.startswith("val-") for line, step, m, _ in rows if step == 0)
    config, summary = real_warehouse
    con = read_db(config)
    assert con.execute("select count(*) from train_metrics where step = 0 and metric not like 'val%'"
                       " and capture like '%ry3hgbx5%'").fetchone() == (0,)
    con.close()


def write_log(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def _rows(config, capture=None):
    con = read_db(config)
    rows = con.execute("select capture, line, step, metric, value from train_metrics "
                       "where capture = coalesce(?, capture) order by capture, line, metric", [capture]).fetchall()
    con.close()
    return rows


def test_ray_prefix_ansi_tqdm_and_numpy_values(tmp_path, config):
    esc = "\x1b[36m(TaskRunner pid=4242)\x1b[0m "
    log = (
        f"{esc}Training from scratch\n"
        f"{esc}global_step:5 - should:1 - not:2\n"
        f"{esc}val training/global_step:5 - no:1\n"
        f"{esc}{{'val/score': np.float64(0.5),\n"
        f"{esc} 'val/x': np.int32(3)}}\n"
        f"Training Progress:   0%|  | 0/3 [00:00<?, ?it/s]\rTraining Progress:  33%|# | 1/3\n"
        f"{esc}step:1 - actor/pg_loss:np.float64(-0.25) - num_turns/min:np.int32(2) - actor/lr:1e-06 - "
        f"a@b(c):nan - big:inf - flag:True - timing_s/gen:12.5\n"
        f"Training Progress:  67%|## | 2/3 [00:01<00:00]\r{esc}step:2 - timing_s/gen:np.float32(3.0)\n"
    )
    write_log(tmp_path / "p" / "train.log", log)
    summary = ingest(tmp_path / "p", config)
    assert [(r.kind, r.status) for r in summary.results] == [("verl_log", "ok")]
    rows = _rows(config)
    assert [(r[1], r[2], r[3]) for r in rows] == [
        (7, 1, "a@b(c)"), (7, 1, "actor/lr"), (7, 1, "actor/pg_loss"), (7, 1, "big"), (7, 1, "flag"),
        (7, 1, "num_turns/min"), (7, 1, "timing_s/gen"), (8, 2, "timing_s/gen")]
    values = {r[3]: r[4] for r in rows if r[2] == 1}
    assert math.isnan(values["a@b(c)"]) and values["big"] == math.inf and values["flag"] == 1.0
    assert (values["actor/pg_loss"], values["num_turns/min"], values["actor/lr"]) == (-0.25, 2.0, 1e-06)
    assert rows[-1][4] == 3.0


def test_cut_records_keep_their_whole_fields(tmp_path, config):
    """A line at wandb's 4,096-character cap and a log that ends mid-record."""
    fields = " - ".join(f"k{i}:{i}.25" for i in range(400))
    capped = ("step:1 - " + fields)[:4096]
    whole = capped.split(" - ")[1:-1]
    write_log(tmp_path / "p" / "a.log", f"boot\n{capped}\nstep:2 - x:1.5 - y:2.5\nstep:3 - x:1.25 - y:2")
    summary = ingest(tmp_path / "p", config)
    (result,) = summary.results
    assert result.status == "partial"
    assert "2 of 3 records cut short" in result.message and "line(s) 2, 4" in result.message
    rows = _rows(config)
    assert sorted(r[3] for r in rows if r[2] == 1) == sorted(f.split(":")[0] for f in whole)
    assert [(r[3], r[4]) for r in rows if r[2] == 3] == [("x", 1.25)]
    assert len([r for r in rows if r[2] == 2]) == 2


def test_wrapped_record_is_joined(tmp_path, config):
    pre = "(TaskRunner pid=7) "
    log = (f"{pre}step:4 - actor/entropy:0.5 - actor/pg_lo\n"
           f"{pre}ss:0.25 - timing_s/step:10.0\n"
           f"{pre}step:5 - a:1 - b:2\n"
           f"{pre} - c:3 - d:4\n"
           f"{pre}done\n")
    write_log(tmp_path / "p" / "run.log", log)
    ingest(tmp_path / "p", config)
    rows = _rows(config)
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [
        (1, 4, "actor/entropy", 0.5), (1, 4, "actor/pg_loss", 0.25), (1, 4, "timing_s/step", 10.0),
        (3, 5, "a", 1.0), (3, 5, "b", 2.0), (3, 5, "c", 3.0), (3, 5, "d", 4.0)]


def test_a_grown_log_replaces_its_rows(tmp_path, config):
    path = write_log(tmp_path / "p" / "wandb" / "run-20250101_000000-abc" / "files" / "output.log",
                     "step:1 - x:1\nstep:2 - x:2\n")
    ingest(tmp_path / "p", config)
    assert [r[2] for r in _rows(config)] == [1, 2]
    with open(path, "a") as f:
        f.write("step:3 - x:3\nstep:4 - x:")
    summary = ingest(tmp_path / "p", config)
    assert summary.results[0].status == "partial"
    rows = _rows(config)
    assert [(r[2], r[4]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert {r[0] for r in rows} == {"wandb/run-20250101_000000-abc/files/output.log"}


def test_place_gives_role_and_rank_else_null(tmp_path, config):
    write_log(tmp_path / "p" / "actor" / "rank3" / "train.log", "step:1 - x:1\n")
    write_log(tmp_path / "p" / "driver.log", "step:1 - x:1\n")
    write_log(tmp_path / "p" / "other.log", "INFO nothing here - step 1\n")
    write_log(tmp_path / "p" / "notes.txt", "see step:1 - x:1 above\n")  # step: after a space starts a record
    ingest(tmp_path / "p", config)
    con = read_db(config)
    rows = con.execute("select path, kind, status, role, rank_id from sources order by path").fetchall()
    message = con.execute("select message from sources where path = 'notes.txt'").fetchone()[0]
    keys = con.execute("select distinct capture, role, rank_id from train_metrics order by capture").fetchall()
    con.close()
    assert rows[0] == ("actor/rank3/train.log", "verl_log", "ok", "actor", 3)
    assert rows[1] == ("driver.log", "verl_log", "ok", None, None)
    assert rows[2][0:3] == ("notes.txt", "verl_log", "failed")  # a record start, but no whole field
    assert rows[3][0:3] == ("other.log", "ignored", "ignored")
    assert message.startswith("notes.txt: ") and "line 1: 'x:1 above'" in message and "nothing loaded" in message
    assert keys[0] == ("actor/rank3/train.log", "actor", 3) and keys[1] == ("driver.log", None, None)


def test_a_binary_file_is_never_a_log(tmp_path):
    write_log(tmp_path / "p" / "x.log", "")
    (tmp_path / "p" / "x.log").write_bytes(b"\x00\x01step:1 - x:1\n")
    assert [f.kind for f in discover(tmp_path / "p").files] == ["ignored"]


def test_copy_of_a_real_log_ingests_the_same(tmp_path, config):
    """A real log moved elsewhere in a profile dir (a plain *.log) is found and read alike."""
    src = next(p for p in REAL_LOGS if "wmqmvslz" in str(p))
    dst = tmp_path / "p" / "logs" / "grpo.log"
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    ingest(tmp_path / "p", config)
    expected, _ = oracle(src)
    assert [(r[1], r[2], r[3]) for r in _rows(config)] == sorted((e[0], e[1], e[2]) for e in expected)


def test_tee_log_lines_past_the_cap_are_whole(tmp_path, config):
    """A `tee` of the driver has no 4,096-character cap: a longer record is not cut, and
    Ray's repeat note and other prefixes do not stick to the last value."""
    fields = " - ".join(f"val-aux/k{i}/mean@16:np.float64({i}.5)" for i in range(150))
    long = f"\x1b[36m(TaskRunner pid=9, ip=10.0.0.2)\x1b[0m step:7 - {fields}"
    assert len(long) > 4096
    log = (f"{long}\n"
           "(TaskRunner pid=9) step:8 - a:1.5 - b:2 [repeated 2x across cluster]\n"
           "2025-06-01 10:00:00,001 INFO:root:step:9 - a:3\n"
           "'step:10 - a:4'\n")
    write_log(tmp_path / "p" / "driver.out", log)
    (result,) = ingest(tmp_path / "p", config).results
    assert (result.kind, result.status, result.message) == ("verl_log", "ok", None)
    rows = _rows(config)
    assert len([r for r in rows if r[2] == 7]) == 150
    assert sorted((r[2], r[3], r[4]) for r in rows if r[2] != 7) == [(8, "a", 1.5), (8, "b", 2.0), (9, "a", 3.0)]
