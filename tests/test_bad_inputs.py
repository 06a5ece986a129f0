"""Bad input is survived: every damaged, hostile or odd file ends with a clear message
naming the file and the position, the good rows of every other file still in, and the
exit status and summary saying what happened.

The corpus is tests/data/bad/<case>/<file> (see make_bad_files.py there); cases too big
to commit or made by the file system are built here at run time. Each bad file gets its
own rank dir beside a good one (the real memory_data sample, role "good"), so one ingest
checks many cases at once.
"""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import SAMPLES, copy_fixture

from rlwh import synth
from rlwh.cli import cli

REPO = Path(__file__).resolve().parent.parent
BAD = REPO / "tests" / "data" / "bad"
HOSTILE_PT = REPO / "tests" / "data" / "gmm" / "hostile_os_system.pt"
GOOD_RANK_DIR = "20260526_085155_ascend_pt"
GOOD_ROWS = {"memory_records": 49, "cpu_ops": 13, "ranks": 1}  # the memory_data sample, loaded whole


# --------------------------------------------------------------------------- building profiles


def _writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def _profile(root: Path) -> Path:
    """A profile dir holding one good rank dir (role "good")."""
    (root / "good").mkdir(parents=True)
    copy_fixture(f"rl-insight-samples/memory_data/{GOOD_RANK_DIR}", root / "good")
    _writable(root)
    return root


def _info(rank: int) -> bytes:
    return json.dumps({"rank_id": rank, "config": {"common_config": {"activities": ["ProfilerActivity.NPU"]}}}).encode()


def _ascend_rank_dir(root: Path, name: str, rank: int) -> Path:
    """root/bad/<name>_ascend_pt with a good profiler_info_<rank>.json; returns the dir."""
    rank_dir = root / "bad" / f"{name}_ascend_pt"
    (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank_dir / f"profiler_info_{rank}.json").write_bytes(_info(rank))
    return rank_dir


def _place(root: Path, case: str, file_name: str, data: bytes, rank: int) -> str:
    """Put one bad file where the profiler would; return its path relative to root."""
    if file_name == "group_list.pt":
        path = root / "gmm" / "step_1" / case / "rank0" / "dump_tensor_data"
        path = path / "NPU.npu_grouped_matmul.0.forward.kwargs.group_list.pt"
        path.parent.mkdir(parents=True)
    else:
        rank_dir = _ascend_rank_dir(root, case, rank)
        if file_name == "profiler_info.json":
            (rank_dir / f"profiler_info_{rank}.json").unlink()
            path = rank_dir / f"profiler_info_{rank}.json"
        else:
            path = rank_dir / "ASCEND_PROFILER_OUTPUT" / file_name
    path.write_bytes(data)
    return str(path.relative_to(root))


def _config_file(folder: Path, workers: int = 1) -> Path:
    path = folder / "rlwh-test.toml"
    path.write_text(f"[ingest]\nworkers = {workers}\nlock_timeout = 5\n")
    return path


def _ingest(profile: Path, db: Path, *args: str):
    """`rlwh ingest` in-process (CliRunner), parsing in-process too."""
    env = {"RLWH_CONFIG": str(_config_file(db.parent)), "RLWH_DB": None}
    return CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), *args], env=env)


def _subprocess_env(folder: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env.update(PYTHONPATH=str(REPO), RLWH_CONFIG=str(_config_file(folder)))
    return env


def _ingest_subprocess(profile: Path, db: Path, preexec_fn=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`rlwh ingest` as its own process (for limits, dropped privileges, hang protection)."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "rlwh.cli", "ingest", str(profile), "--db", str(db)],
            capture_output=True, text=True, env=_subprocess_env(db.parent), cwd=db.parent,
            preexec_fn=preexec_fn, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`rlwh ingest` hung for {timeout} s on {profile}")


def _sources(db: Path) -> dict[str, tuple[str, int, str | None]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("select path, status, rows, message from sources").fetchall()
        return {p: (s, n, m) for p, s, n, m in rows}
    finally:
        con.close()


def _scalar(db: Path, sql: str, params=()):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchone()[0]
    finally:
        con.close()


def _assert_good_rows_in(db: Path) -> None:
    """Every table's good rows, counted on one connection (an open costs ~25 ms)."""
    with duckdb.connect(str(db), read_only=True) as con:
        for table, rows in GOOD_ROWS.items():
            got = con.execute(f"select count(*) from {table} where role = 'good'").fetchone()[0]
            assert got == rows, f"{table}: {got} good rows, want {rows}"


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Expect:
    status: str | tuple[str, ...]  # one status, or the statuses accepted
    rows: int | None = None  # exact rows, or None: at least the `present` ones
    message: str | None = None  # regex the message must match (it must also name the file)
    present: tuple[str, ...] = ()  # names of good events/rows of the file that must be loaded
    no_null_ts: bool = False  # no cpu_op of the file without a time


TRACE_KEPT = ("ok", "partial")
CASES: dict[str, Expect] = {
    "trace_empty": Expect("failed", 0, r"empty"),
    "trace_object": Expect("failed", 0, r"array"),
    "trace_non_objects": Expect("partial", 1, r"object", ("good_1",)),
    "trace_wrong_types": Expect("partial", None, r"event", ("good_1",), no_null_ts=True),
    "trace_nan_tokens": Expect("partial", None, r"event|byte \d+", ("good_1",), no_null_ts=True),
    "trace_nan_strings": Expect("partial", None, r"event", ("good_1",), no_null_ts=True),
    "trace_absurd_numbers": Expect("partial", None, r"event", ("good_1",), no_null_ts=True),
    "trace_non_utf8": Expect("partial", None, r"byte \d+", ("good_1",)),
    "trace_trailing_commas": Expect(TRACE_KEPT, 2, None, ("good_1", "good_2")),
    "trace_missing_bracket": Expect(TRACE_KEPT, 2, None, ("good_1", "good_2")),
    "trace_control_chars": Expect(TRACE_KEPT, 3, None, ("good_1", "good_3")),
    "trace_cut_mid_event": Expect("partial", 2, r"byte \d+", ("good_1", "good_2")),
    "trace_10mb_line": Expect("ok", 2, None, ("good_1",)),
    "trace_deep_nesting": Expect("ok", 2, None, ("good_1",)),
    "csv_empty": Expect("failed", 0, r"empty"),
    "csv_header_only": Expect("ok", 0),
    "csv_bad_row": Expect("partial", 4, r"\brow 3\b", ("a", "b", "c", "d")),
    "csv_bad_values": Expect("partial", 2, r"\brow 2\b.*\brow 3\b.*\brow 4\b.*\brow 5\b.*\brow 6\b",
                             ("good_1", "good_2")),
    "csv_non_utf8": Expect("partial", 2, r"\brow 1\b", ("good_1", "good_2")),
    "csv_10mb_line": Expect("partial", 2, r"\brow 1\b", ("good_1", "good_2")),
    "csv_missing_columns": Expect("failed", 0, r"missing column"),
    "info_empty": Expect("failed", 0, r"empty|byte 0"),
    "info_wrong_types": Expect("failed", 0, r"rank_id"),
    "info_array": Expect("failed", 0, r"object"),
    "info_non_utf8": Expect("failed", 0, r"UTF-8.*byte \d+"),
    "info_deep_nesting": Expect("failed", 0, r"(?i)recursion|nest|deep"),
    "gmm_empty": Expect("failed", 0, r"empty"),
    "gmm_garbage": Expect("failed", 0, r"zip|torch\.save"),
    "gmm_hostile": Expect("failed", 0, r"refus"),
    "pickle_not_snapshot": Expect("failed", 0,
                                  r"not a memory snapshot .*; found a dict with keys '\\x1b\[31mloss', 'step'$"),
    "pickle_empty": Expect("failed", 0, r"empty file \(0 bytes\)"),
    "pickle_garbage": Expect("failed", 0, r"not a readable pickle \(\d+ bytes\)"),
    "pickle_asks_for_code": Expect("failed", 0,
                                   r"refused: the pickle asks for os\.system \(opcode GLOBAL at byte 30\)"),
    "pickle_cut": Expect("failed", 0, r"cut short: the pickle ends at byte \d+"),
}


def _make():
    """tests/data/bad/make_bad_files.py, the corpus' own builders."""
    sys.path.insert(0, str(BAD))
    try:
        import make_bad_files
    finally:
        sys.path.remove(str(BAD))
    return make_bad_files


def _committed_cases() -> dict[str, tuple[str, bytes]]:
    """case -> (file name, bytes) for every folder of tests/data/bad."""
    found = {}
    for folder in sorted(p for p in BAD.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        (path,) = [p for p in folder.iterdir() if p.is_file()]
        found[folder.name] = (path.name, path.read_bytes())
    return found


def _generated_cases() -> dict[str, tuple[str, bytes]]:
    """Cases too big to commit (or copies of other test data), made at run time."""
    make = _make()
    ten_mb = "x" * 10_000_000
    nested = "[" * 100_000 + "]" * 100_000
    return {
        "trace_10mb_line": ("trace_view.json", make.trace(make.event(ten_mb), make.event("good_1"))),
        "trace_deep_nesting": ("trace_view.json", make.trace(
            json.dumps(make.event("deep"))[:-1] + f', "nested": {nested}}}', make.event("good_1"))),
        "csv_10mb_line": ("operator_memory.csv", "\n".join(
            [make.CSV_HEADER, make.csv_row(ten_mb, i=1), make.csv_row("good_1", i=2), make.csv_row("good_2", i=3)]
        ).encode() + b"\n"),
        "info_deep_nesting": ("profiler_info.json", f'{{"x": 1, "deep": {nested}}}'.encode()),
        "gmm_hostile": ("group_list.pt", HOSTILE_PT.read_bytes()),
    }


def test_the_committed_corpus_is_what_the_generator_makes():
    committed = _committed_cases()
    assert committed == _make().cases(), "tests/data/bad is stale: rerun make_bad_files.py"
    assert set(committed) | set(_generated_cases()) == set(CASES)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """One ingest of the good rank dir and every corpus case; (CLI result, sources, db, paths)."""
    tmp = tmp_path_factory.mktemp("corpus")
    root = _profile(tmp / "profile")
    paths = {}
    files = {**_committed_cases(), **_generated_cases()}
    for rank, case in enumerate(sorted(CASES), start=1):
        name, data = files[case]
        paths[case] = _place(root, case, name, data, rank)
    db = tmp / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    cwd = os.getcwd()
    os.chdir(tmp)  # the hostile pickle would `touch rlwh-hostile-ran` here
    try:
        result = _ingest(root, db, "--run", "corpus")
    finally:
        os.chdir(cwd)
    assert not (tmp / "rlwh-hostile-ran").exists(), "a pickle in a .pt file ran code"
    return result, _sources(db) if db.exists() else {}, db, paths


@pytest.mark.slow
def test_corpus_ingest_finishes_and_reports_truthfully(corpus):
    result, sources, db, paths = corpus
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    _assert_good_rows_in(db)
    statuses = [s for s, _, _ in sources.values()]
    failed, partial = statuses.count("failed"), statuses.count("partial")
    assert failed > 0 and result.exit_code == 1
    assert f"{partial} partial, {failed} failed" in result.output
    # One "failed: <message>" / "partial: <message>" line per such file, naming it.
    assert len(re.findall(r"^failed: ", result.output, re.M)) == failed
    assert len(re.findall(r"^partial: ", result.output, re.M)) == partial


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_corpus_case(corpus, case):
    result, sources, db, paths = corpus
    expect = CASES[case]
    rel = paths[case]
    assert rel in sources, f"{rel} is not in sources: {result.output[-2000:]}"
    status, rows, message = sources[rel]
    wanted = expect.status if isinstance(expect.status, tuple) else (expect.status,)
    assert status in wanted, f"{case}: status {status}, want {wanted} ({message})"
    if expect.rows is not None:
        assert rows == expect.rows, f"{case}: {rows} rows, want {expect.rows} ({message})"
    if status != "ok":
        assert message and rel in message, f"{case}: the message does not name the file: {message!r}"
    if expect.message:
        assert message and re.search(expect.message, message, re.S), f"{case}: message {message!r}"
    con = duckdb.connect(str(db), read_only=True)
    try:
        source_id = con.execute("select source_id from sources where path = ?", [rel]).fetchone()[0]
        table = "memory_records" if rel.endswith(".csv") else "cpu_ops"
        names = {r[0] for r in con.execute(f"select name from {table} where source_id = ?", [source_id]).fetchall()}
        assert set(expect.present) <= names, f"{case}: good rows missing: {set(expect.present) - names}"
        if expect.no_null_ts:
            assert con.execute("select count(*) from cpu_ops where source_id = ? and ts_ns is null",
                               [source_id]).fetchone()[0] == 0, f"{case}: cpu_ops without a time were loaded"
        # sources.rows tells the truth.
        loaded = sum(con.execute(f"select count(*) from {t} where source_id = ?", [source_id]).fetchone()[0]
                     for t in ("memory_records", "cpu_ops", "ranges", "ranks", "gmm_expert_load"))
        assert loaded == rows
    finally:
        con.close()


# --------------------------------------------------------------------------- truncation at any byte


def _event_ends(data: bytes) -> list[int]:
    """Byte offsets just past each event of a JSON array of objects (an independent parse)."""
    text = data.decode("utf-8")
    decoder = json.JSONDecoder()
    pos, ends = text.index("[") + 1, []
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            return ends
        _, pos = decoder.raw_decode(text, pos)
        ends.append(len(text[:pos].encode("utf-8")))


def _cut_points(data: bytes, ends: list[int]) -> list[int]:
    """Cuts at and around event ends, inside strings, numbers, escapes and multi-byte characters."""
    cuts = {1, 2, ends[0] // 2}
    for end in (ends[0], ends[1], ends[len(ends) // 2], ends[-1]):
        cuts |= {end - 1, end, end + 1, end + 2}
    start = ends[2]
    cuts.add(data.index(b"\\r\\n", start) + 1)  # inside an escape
    cuts.add(data.index(b'"ts": "', start) + 12)  # inside a time
    cuts.add(data.index("算子".encode(), start) + 1)  # inside a UTF-8 character
    cuts.add(len(data) - 1)  # only the closing ']' missing
    return sorted(c for c in cuts if 0 < c < len(data))


@pytest.mark.slow
def test_trace_view_cut_at_any_byte_keeps_every_complete_event(tmp_path):
    make = _make()
    events = [make.event(f"算子_{i}" if i % 3 == 0 else f"op_{i}", ts=f"1779785515{694669 + i}.200") for i in range(8)]
    data = json.dumps(events, indent=2, ensure_ascii=False).encode()  # pretty, like the real sample
    ends = _event_ends(data)
    root = _profile(tmp_path / "profile")
    cuts = _cut_points(data, ends)
    paths = {cut: _place(root, f"cut_{cut:05d}", "trace_view.json", data[:cut], rank) for rank, cut in
             enumerate(cuts, start=1)}
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    result = _ingest(root, db)
    assert "Traceback" not in result.output, result.output
    sources = _sources(db)
    _assert_good_rows_in(db)
    wrong = []
    for cut, rel in paths.items():
        status, rows, message = sources[rel]
        complete = sum(1 for end in ends if end <= cut)
        want = "partial" if complete else "failed"
        if (status, rows) != (want, complete) or not message or str(cut) not in message or rel not in message:
            wrong.append(f"cut at byte {cut}: {status} {rows} rows, want {want} {complete}; message {message!r}")
    assert not wrong, "\n".join(wrong)


def _torch_events_before(data: bytes, cut: int) -> list[dict]:
    """The complete traceEvents items before `cut` (an independent parse)."""
    text = data[:cut].decode("utf-8", "ignore")
    start = text.find('"traceEvents"')
    if start < 0:
        return []
    pos, decoder, events = text.index("[", start) + 1, json.JSONDecoder(), []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return events
        try:
            event, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return events
        events.append(event)


@pytest.mark.slow
def test_pytorch_trace_cut_at_any_byte_keeps_every_complete_event(tmp_path):
    source = SAMPLES.parent / "torch_profile" / "actor_update" / "prof_rank-0.pt.trace.json.gz"
    data = gzip.decompress(source.read_bytes())
    events_at = data.index(b'"traceEvents"')
    root = tmp_path / "profile"
    cases = {}
    for i, cut in enumerate([events_at - 5, events_at + 40, len(data) // 3, len(data) // 2 + 7,
                             len(data) - 300, len(data) - 1]):
        folder = root / "actor_update" / f"rank{i}"
        folder.mkdir(parents=True)
        (folder / f"prof_rank-{i}.pt.trace.json").write_bytes(data[:cut])
        cases[cut] = f"actor_update/rank{i}/prof_rank-{i}.pt.trace.json"
    gz = gzip.compress(data)
    folder = root / "actor_update" / "rank9"
    folder.mkdir(parents=True)
    (folder / "prof_rank-9.pt.trace.json.gz").write_bytes(gz[: len(gz) // 2])  # the gzip stream cut, too
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    result = _ingest(root, db)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    sources = _sources(db)
    con = duckdb.connect(str(db), read_only=True)
    wrong = []
    for cut, rel in cases.items():
        status, rows, message = sources[rel]
        before = _torch_events_before(data, cut)
        ops = sum(1 for e in before if e.get("cat") == "cpu_op")
        mem = sum(1 for e in before if e.get("name") == "[memory]")
        got = con.execute(
            "select (select count(*) from cpu_ops c where c.source_id = s.source_id),"
            " (select count(*) from torch_memory_events m where m.source_id = s.source_id)"
            " from sources s where path = ?", [rel]).fetchone()
        # A cut file is partial, even when only its last '}' is missing; with no complete event
        # it may be failed, or partial with what its header says about the rank.
        want = ("partial",) if before else ("failed", "partial")
        if status not in want or got != (ops, mem) or not message or rel not in message or "byte" not in message:
            wrong.append(f"cut at {cut}: {status} {got}, want {want} {(ops, mem)}; message {message!r}")
    status, rows, message = sources["actor_update/rank9/prof_rank-9.pt.trace.json.gz"]
    if status != "partial" or "byte" not in (message or ""):
        wrong.append(f"gzip cut: {status} {rows} rows; message {message!r}")
    con.close()
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- the file system


def _without_root_override():
    """preexec_fn: root loses the capabilities that ignore file permissions (as a user has none)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.slow
def test_permission_denied_is_a_failed_file_and_a_warning_not_a_crash(tmp_path):
    root = _profile(tmp_path / "profile")
    shutil.copytree(root / "good" / GOOD_RANK_DIR, root / "locked" / GOOD_RANK_DIR)
    denied = root / "locked" / GOOD_RANK_DIR / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    denied.chmod(0)
    shut = root / "shut" / "20260527_000000_ascend_pt"
    shutil.copytree(root / "good" / GOOD_RANK_DIR, shut)
    shut.chmod(0)
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    try:
        done = _ingest_subprocess(root, db, preexec_fn=_without_root_override)
    finally:
        shut.chmod(0o755)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    _assert_good_rows_in(db)
    # The rest of the locked rank dir loads.
    assert _scalar(db, "select count(*) from memory_records where role = 'locked'") == 49
    rel = str(denied.relative_to(root))
    status, rows, message = _sources(db)[rel]
    assert (status, rows) == ("failed", 0) and "Permission denied" in message and rel in message
    assert done.returncode == 1 and "1 failed" in output
    assert f"cannot list {shut}" in output or f"cannot read {shut}" in output  # the unreadable folder is named


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _tables_differ(got: Path, want: Path) -> list[str]:
    """The tables (main and internal) whose rows differ between two warehouses, duplicates counted."""
    con = duckdb.connect()
    try:
        con.execute(f"attach '{got}' as got (read_only)")
        con.execute(f"attach '{want}' as want (read_only)")
        listed = ("select schema_name || '.' || table_name from duckdb_tables() where database_name = ? "
                  "and schema_name in ('main', 'internal') order by 1")
        tables = [t for (t,) in con.execute(listed, ["want"]).fetchall()]
        assert [t for (t,) in con.execute(listed, ["got"]).fetchall()] == tables
        return [t for t in tables if con.execute(
            f"select count(*) from ((from got.{t} except all from want.{t}) "
            f"union all (from want.{t} except all from got.{t}))").fetchone()[0]]
    finally:
        con.close()


@pytest.mark.slow
def test_disk_full_while_writing_the_warehouse_leaves_it_as_it_was(tmp_path):
    root = _profile(tmp_path / "profile")
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    assert _ingest(root, db).exit_code == 0
    before = tmp_path / "before.duckdb"
    shutil.copy(db, before)
    # A new rank dir whose rows need several MB more than the limit leaves the warehouse.
    synth.write_ascend_rank(root / "big", n_ops=30_000, n_allocs=30_000, n_stacks=64)
    done = _ingest_subprocess(root, db, preexec_fn=_limit_file_size(before.stat().st_size + (2 << 20)))
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "Traceback" not in output, output
    assert re.search(r"(?i)file too large|no space", output), output
    assert str(db.name) in output  # which file could not be written
    # The published warehouse holds exactly what it held. Not byte for byte: the append's
    # commit checkpoints, and a checkpoint that fails may have written blocks the file does
    # not use (its header still names the old ones).
    assert _tables_differ(db, before) == []
    leftovers = sorted(p.name for p in db.parent.iterdir() if p.name not in (db.name, db.name + ".lock",
                                                                              "rlwh-test.toml"))
    assert leftovers == [], leftovers
    # With room again, the same ingest goes through.
    again = _ingest(root, db)
    assert again.exit_code == 0, again.output
    assert _scalar(db, "select count(*) from cpu_ops where role = 'big'") > 0
    assert "main.cpu_ops" in _tables_differ(db, before)  # the check above sees a change


@pytest.mark.slow
def test_special_files_named_like_sources_are_named_not_hung_on(tmp_path):
    root = _profile(tmp_path / "profile")
    odd = root / "odd" / "20260527_000000_ascend_pt"
    (odd / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    os.mkfifo(odd / "profiler_info_3.json")  # a FIFO: opening it would block forever
    (odd / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv").mkdir()  # a folder
    (odd / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").symlink_to("trace_view.json")  # a link to itself
    torch_dir = root / "actor_update"
    torch_dir.mkdir()
    os.mkfifo(torch_dir / "prof_rank-5.pt.trace.json")
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    done = _ingest_subprocess(root, db, timeout=20)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    _assert_good_rows_in(db)
    for path in (odd / "profiler_info_3.json", odd / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv",
                 odd / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", torch_dir / "prof_rank-5.pt.trace.json"):
        assert str(path) in output, f"nothing says why {path} was not read:\n{output}"


def test_symlink_loops_are_walked_once(tmp_path):
    root = _profile(tmp_path / "profile")
    (root / "good" / "again").symlink_to(root)  # a loop back to the top
    (root / "self").symlink_to("self")  # a link to itself
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    result = _ingest(root, db)
    assert result.exit_code == 0, result.output
    assert "symlink loop" in result.output and str(root / "good" / "again") in result.output
    _assert_good_rows_in(db)  # once, not once per way round the loop
    assert _scalar(db, "select count(*) from sources where status <> 'ignored'") == 3


def test_a_folder_name_that_is_not_utf8_is_named_and_the_rest_loads(tmp_path):
    root = _profile(tmp_path / "profile")
    odd = os.fsdecode(os.fsencode(root) + b"/r\xfble")  # a role folder named in Latin-1
    os.mkdir(odd)
    shutil.copytree(root / "good" / GOOD_RANK_DIR, Path(odd) / GOOD_RANK_DIR)
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    result = _ingest(root, db)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    _assert_good_rows_in(db)
    assert re.search(r"r\\xfble|r\?le|r\ufffdle|r\\udcfble", result.output), result.output  # named, readably


def test_duplicate_ranks_stay_apart_by_capture(tmp_path):
    root = tmp_path / "profile"
    (root / "actor").mkdir(parents=True)
    copy_fixture(f"rl-insight-samples/memory_data/{GOOD_RANK_DIR}", root / "actor")
    shutil.copytree(root / "actor" / GOOD_RANK_DIR, root / "actor" / "20260527_000000_ascend_pt")  # rank 0 again
    _writable(root)
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    result = _ingest(root, db)
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("select capture, count(*) from memory_records group by 1 order by 1").fetchall() == [
        (f"actor/{GOOD_RANK_DIR}", 49), ("actor/20260527_000000_ascend_pt", 49)]  # capture: path in the profile
    assert con.execute("select count(*), count(distinct capture) from ranks where rank_id = 0").fetchone() == (2, 2)
    con.close()


def test_hostile_names_are_values_never_sql_or_paths(tmp_path):
    root = tmp_path / "profile"
    folder = root / "x'); drop table runs; --"
    folder.mkdir(parents=True)
    copy_fixture(f"rl-insight-samples/memory_data/{GOOD_RANK_DIR}", folder)
    _writable(root)
    meta = folder / GOOD_RANK_DIR / "profiler_metadata.json"
    role = "r'||(select 1)||'\"; drop table sources; -- ../../escaped <script>alert(1)</script>"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "role": role}))
    run = "run'; drop table cpu_ops; --/../../escaped"
    db = tmp_path / "wh" / "warehouse.duckdb"
    db.parent.mkdir()
    result = _ingest(root, db, "--run", run)
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("select distinct run, role from memory_records").fetchall() == [(run, role)]
    assert con.execute("select count(*) from cpu_ops").fetchone()[0] == 13  # every table is still there
    assert con.execute("select run from runs").fetchall() == [(run,)]
    con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile", "wh"]  # nothing written elsewhere
    assert not (tmp_path.parent / "escaped").exists()
