"""rlwh.readers.gmm, and the gmm_imbalance and gmm_layer_load views over what it loads."""

import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from conftest import landed_rows

from rlwh.config import Config
from rlwh.errors import SourceError
from rlwh.ingest import in_place
from rlwh.ingest.runner import ingest
from rlwh.readers import gmm
from rlwh.readers.base import TableSink
from rlwh.readers.gmm import GmmPath, parse_gmm_path
from rlwh.synth.pt import write_int_tensor

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "gmm"
FIXTURES = ROOT / "tests" / "data"  # the real files (tests/data/SOURCES)
DUMP = "dump_tensor_data/NPU.npu_grouped_matmul.{op}.forward.kwargs.group_list.pt"


def copy_tree(src: Path, dst: Path) -> Path:
    """Copy a read-only fixture folder into the test's tmp dir, writable."""
    for f in src.rglob("*"):
        if f.is_file():
            (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst / f.relative_to(src))
    return dst


COLUMNS = ["role", "rank_id", "step", "op_index", "expert", "tokens"]


def read_all(profile: Path, sink_dir: Path) -> pa.Table:
    """Read every group_list dump under `profile` into one sink; the gmm_expert_load rows its
    job (ingest/gmm_group_list.sql) lands."""
    sink = TableSink(sink_dir)
    for f in sorted(profile.rglob("*group_list.pt")):
        outcome = gmm.read(f, sink, {"rel_path": f.relative_to(profile).as_posix()})
        assert (outcome.status, outcome.message) == ("ok", None)
    sink.close()
    return pa.Table.from_pylist(landed_rows("gmm_group_list", sink, "gmm_expert_load", COLUMNS))


def insert_calls(con, role: str, rank_id: int, loads: dict[int, list[int]], step: int = 1) -> None:
    """gmm_expert_load rows: op_index -> tokens by expert."""
    rows = [
        ("r", role, rank_id, f"op{op}.pt", 1, step, op, expert, tokens)
        for op, load in loads.items()
        for expert, tokens in enumerate(load)
    ]
    con.executemany("insert into gmm_expert_load values (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


# --- parse_gmm_path ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "rel_path, want",
    [
        ("step_1/actor_update/rank0/" + DUMP.format(op=11), GmmPath(1, "actor_update", 0, 11)),
        ("gmm_data/step_12/ref_compute_log_prob/rank7/" + DUMP.format(op=0), GmmPath(12, "ref_compute_log_prob", 7, 0)),
        ("step_3/rollout/rank_2/Functional.grouped_matmul.7.forward.kwargs.group_list.pt", GmmPath(3, "rollout", 2, 7)),
        ("step5/critic_update/rank1/x/y/GPU.npu_grouped_matmul.12.forward.kwargs.group_list.pt",
         GmmPath(5, "critic_update", 1, 12)),
        ("step_1\\actor_update\\rank3\\dump_tensor_data\\NPU.npu_grouped_matmul.2.forward.kwargs.group_list.pt",
         GmmPath(1, "actor_update", 3, 2)),
        # the last step folder counts: an outer "step_9" is part of where the run lives
        ("step_9/run/step_2/actor_update/rank0/" + DUMP.format(op=4), GmmPath(2, "actor_update", 0, 4)),
        # RL-Insight's rank-first layout
        ("rank3/step_1/actor_update/" + DUMP.format(op=5), GmmPath(1, "actor_update", 3, 5)),
        ("gmm/rank-1/step_2/ref/" + DUMP.format(op=0), GmmPath(2, "ref", 1, 0)),
        # msprobe's own layout has no role folder: NULL, never the step, rank or dump folder
        ("step1/rank0/" + DUMP.format(op=2), GmmPath(1, None, 0, 2)),
        ("rank0/step_1/" + DUMP.format(op=2), GmmPath(1, None, 0, 2)),
        # ... unless a folder above it names the role
        ("critic/step1/rank_4/" + DUMP.format(op=2), GmmPath(1, "critic", 4, 2)),
    ],
)
def test_parse_gmm_path(rel_path, want):
    assert parse_gmm_path(rel_path) == want


@pytest.mark.parametrize(
    "rel_path, why",
    [
        ("actor_update/rank0/" + DUMP.format(op=0), "no step_<n> folder"),
        ("step_1/actor_update/" + DUMP.format(op=0), "no rank<k> folder in step_1/actor_update/dump_tensor_data"),
        ("step_1/actor_update/rank0/dump_tensor_data/NPU.npu_grouped_matmul.forward.kwargs.group_list.pt",
         "the file name has no grouped_matmul.<op>."),
        ("step_1/actor_update/rank0/dump_tensor_data/NPU.npu_grouped_matmul.0.forward.kwargs.weight.pt",
         "does not end in group_list.pt"),
        ("step_1/actor_update/rank0/dump_tensor_data/NPU.npu_grouped_matmul.0.backward.kwargs.group_list.pt",
         "it is a backward dump"),
        ("step_99999999999/actor_update/rank0/" + DUMP.format(op=0), "step 99999999999 does not fit an INTEGER"),
    ],
)
def test_parse_gmm_path_says_what_breaks_the_convention(rel_path, why):
    with pytest.raises(SourceError) as err:
        parse_gmm_path(rel_path)
    message = str(err.value)
    assert message.startswith(f"{rel_path}: ")
    assert why in message
    assert message.endswith(f"expected {gmm.CONVENTION}")


# --- read ---------------------------------------------------------------------------------


def test_reads_the_shared_gmm_dump(tmp_path):
    table = read_all(copy_tree(FIXTURES / "gmm_dump", tmp_path / "gmm_dump"), tmp_path / "sink")
    assert table.column_names == COLUMNS
    # 2 steps x 2 roles x 2 ranks x 12 grouped matmuls x 16 experts
    assert table.num_rows == 2 * 2 * 2 * 12 * 16
    keys = set(zip(table.column("step").to_pylist(), table.column("role").to_pylist(),
                   table.column("rank_id").to_pylist(), strict=True))
    assert keys == {(s, r, k) for s in (1, 2) for r in ("actor_update", "actor_compute_log_prob") for k in (0, 1)}
    assert set(table.column("expert").to_pylist()) == set(range(16))
    assert sum(table.column("tokens").to_pylist()) == 96 * 4096


def test_reads_the_rl_insight_samples(tmp_path):
    table = read_all(copy_tree(FIXTURES / "rl-insight-samples" / "gmm_data", tmp_path / "gmm_data"), tmp_path / "sink")
    rows = sorted(tuple(row.values()) for row in table.to_pylist())
    assert rows == [
        ("actor_compute_log_prob", 0, 1, 0, 0, 120), ("actor_compute_log_prob", 0, 1, 0, 1, 48),
        ("actor_compute_log_prob", 0, 1, 0, 2, 96), ("actor_compute_log_prob", 0, 1, 1, 0, 33),
        ("actor_compute_log_prob", 0, 1, 1, 1, 89), ("actor_compute_log_prob", 0, 1, 1, 2, 52),
        ("actor_update", 0, 1, 0, 0, 45), ("actor_update", 0, 1, 0, 1, 72), ("actor_update", 0, 1, 0, 2, 18),
    ]


def _place(tmp_path: Path, src: Path, op: int = 0) -> tuple[Path, str]:
    rel = "step_4/actor_update/rank2/" + DUMP.format(op=op)
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, tmp_path / rel)
    return tmp_path / rel, rel


def test_a_2d_group_list_numbers_experts_in_flattened_order(tmp_path):
    path, rel = _place(tmp_path, DATA / "int64_2d.pt", op=3)
    sink = TableSink(tmp_path / "sink")
    gmm.read(path, sink, {"rel_path": rel})
    sink.close()
    table = pa.Table.from_pylist(landed_rows("gmm_group_list", sink, "gmm_expert_load", COLUMNS))
    assert table.column("expert").to_pylist() == list(range(16))
    assert table.column("tokens").to_pylist() == [10 * i for i in range(16)]
    assert set(table.column("op_index").to_pylist()) == {3}


def test_without_rel_path_the_path_itself_is_parsed(tmp_path):
    path, _ = _place(tmp_path, DATA / "int32_1d.pt")
    sink = TableSink(tmp_path / "sink")
    gmm.read(path, sink, {})
    sink.close()
    table = pa.Table.from_pylist(landed_rows("gmm_group_list", sink, "gmm_expert_load", COLUMNS))
    first = {"role": "actor_update", "rank_id": 2, "step": 4, "op_index": 0, "expert": 0, "tokens": 5}
    assert table.to_pylist()[0] == first


@pytest.mark.parametrize(
    "src, why",
    [
        (DATA / "hostile_os_system.pt", "pickle references os.system, which could run code"),
        (DATA / "float32.pt", "tensor holds float32 values, not integers"),
        (DATA / "uint64_huge.pt", "a token count is larger than a BIGINT"),
    ],
)
def test_a_bad_file_fails_naming_it_and_writes_nothing(tmp_path, monkeypatch, src, why):
    monkeypatch.chdir(tmp_path)
    path, rel = _place(tmp_path, src)
    sink = TableSink(tmp_path / "sink")
    with pytest.raises(SourceError) as err:
        gmm.read(path, sink, {"rel_path": rel})
    sink.close()
    assert str(path) in str(err.value) and why in str(err.value)
    assert sink.tables() == {}
    assert not (tmp_path / "rlwh-hostile-ran").exists()


def test_a_truncated_dump_fails_naming_it(tmp_path):
    path, rel = _place(tmp_path, FIXTURES / "gmm_dump/step_1/actor_update/rank0" / DUMP.format(op=0))
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(SourceError, match=f"cannot read {path}: truncated or corrupt zip archive"):
        gmm.read(path, TableSink(tmp_path / "sink"), {"rel_path": rel})


def test_a_path_without_rank_fails_before_reading(tmp_path):
    path = tmp_path / "step_1" / "actor_update" / "NPU.npu_grouped_matmul.0.forward.kwargs.group_list.pt"
    path.parent.mkdir(parents=True)
    write_int_tensor(path, [1, 2])
    with pytest.raises(SourceError, match="no rank<k> folder"):
        gmm.read(path, TableSink(tmp_path / "sink"), {"rel_path": "step_1/actor_update/" + path.name})


def test_an_ingest_reads_dumps_in_batches_and_a_bad_one_costs_only_itself(tmp_path, monkeypatch):
    """The writer reads the dumps itself, a batch at a time (rlwh.ingest.in_place): a truncated
    and a hostile dump fail alone, each named with why, in the one read of their batch, and
    the others land the rows the per-file reader gives them."""
    monkeypatch.chdir(tmp_path)  # the hostile pickle would `touch rlwh-hostile-ran` here
    assert in_place.reads_in_place("gmm_group_list")
    reads: list[int] = []
    real = gmm.read_in_place
    monkeypatch.setattr(gmm, "read_in_place", lambda con, paths, *rest: (reads.append(len(paths)),
                                                                         real(con, paths, *rest))[1])
    good = copy_tree(FIXTURES / "gmm_dump", tmp_path / "good")
    profile = copy_tree(good, tmp_path / "profile")
    bad = {"step_1/actor_update/rank0/" + DUMP.format(op=0): "truncated or corrupt zip archive",
           "step_2/actor_compute_log_prob/rank1/" + DUMP.format(op=5): "os.system"}
    truncated, hostile = (profile / rel for rel in bad)
    truncated.write_bytes(truncated.read_bytes()[:1000])
    shutil.copyfile(DATA / "hostile_os_system.pt", hostile)
    for rel in bad:
        (good / rel).unlink()
    summary = ingest(profile, Config(db_path=tmp_path / "w.duckdb", workers=1), run="r")
    assert reads == [2 * 2 * 2 * 12]  # one batch, read once
    failed = {r.rel_path: r.message for r in summary.results if r.status != "ok"}
    assert set(failed) == set(bad) and {r.status for r in summary.results if r.status != "ok"} == {"failed"}
    assert all(rel in failed[rel] and why in failed[rel] for rel, why in bad.items()), failed
    assert not (tmp_path / "rlwh-hostile-ran").exists()
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        got = con.execute(f"select {', '.join(COLUMNS)} from gmm_expert_load").fetchall()
    want = read_all(good, tmp_path / "sink")
    assert len(got) == want.num_rows == (2 * 2 * 2 * 12 - 2) * 16
    assert sorted(got) == sorted(tuple(row.values()) for row in want.to_pylist())
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        said = dict(con.execute("select path, message from sources where status = 'failed'").fetchall())
    assert set(said) == set(bad) and all(why in said[rel] and str(tmp_path) not in said[rel]
                                         for rel, why in bad.items()), said


# --- views ----------------------------------------------------------------------------------


def test_gmm_imbalance(empty_db):
    insert_calls(empty_db, "actor_update", 0, {0: [0, 10, 10, 4], 1: [0, 0]})
    rows = empty_db.sql(
        "select op_index, experts, total_tokens, max_tokens, mean_tokens, round(max_mean_ratio, 4), round(cv, 4),"
        " hottest_expert from gmm_imbalance order by op_index"
    ).fetchall()
    # tokens 0, 10, 10, 4: mean 6, population variance (36 + 16 + 16 + 4) / 4 = 18
    assert rows == [
        (0, 4, 24, 10, 6.0, round(10 / 6, 4), round(18**0.5 / 6, 4), 1),
        (1, 2, 0, 0, 0.0, None, None, 0),
    ]


A, B, C, D, E = [5, 1], [2, 4], [3, 3], [6, 0], [1, 5]


def layer_rows(con, role: str, rank_id: int) -> list[tuple]:
    return con.sql(
        "select op_index, phase, layer, op_in_layer, list(tokens order by expert) from gmm_layer_load"
        " where role = ? and rank_id = ? group by all order by op_index",
        params=[role, rank_id],
    ).fetchall()


def test_gmm_layer_load_finds_layers_and_the_backward_pass(empty_db):
    # Forward: layers A B C D, 3 calls each. Then D's run grows past 3: the backward pass
    # (recomputed and backward calls of the last layer), then C's, then a routing E
    # that no forward layer had.
    calls = [A] * 3 + [B] * 3 + [C] * 3 + [D] * 3 + [D] * 6 + [C] * 3 + [E]
    insert_calls(empty_db, "actor_update", 0, dict(enumerate(calls)))
    forward = [(op, "forward", op // 3, op % 3 + 1, calls[op]) for op in range(12)]
    backward = [(12 + i, "backward", 3, i % 3 + 1, D) for i in range(6)]
    backward += [(18 + i, "backward", 2, i + 1, C) for i in range(3)] + [(21, "backward", None, 1, E)]
    assert layer_rows(empty_db, "actor_update", 0) == forward + backward
    assert empty_db.sql("select distinct ops_per_layer from gmm_layer_load").fetchall() == [(3,)]


def test_gmm_layer_load_forward_only_roles_never_turn_backward(empty_db):
    # Two consecutive layers with the same routing: one run of 6, two layers.
    insert_calls(empty_db, "actor_compute_log_prob", 0, dict(enumerate([A] * 3 + [B] * 6)))
    assert layer_rows(empty_db, "actor_compute_log_prob", 0) == [
        (op, "forward", op // 3, op % 3 + 1, A if op < 3 else B) for op in range(9)
    ]


def test_gmm_layer_load_a_missing_op_breaks_the_run(empty_db):
    # op 3 was not dumped: 0-2 and 4-6 are two layers, not one run of 6 (no backward).
    insert_calls(empty_db, "actor_update", 1, {0: A, 1: A, 2: A, 4: A, 5: A, 6: A})
    assert [r[:4] for r in layer_rows(empty_db, "actor_update", 1)] == [
        (0, "forward", 0, 1), (1, "forward", 0, 2), (2, "forward", 0, 3),
        (4, "forward", 1, 1), (5, "forward", 1, 2), (6, "forward", 1, 3),
    ]


def test_views_over_the_shared_gmm_dump(empty_db, tmp_path):
    table = read_all(copy_tree(FIXTURES / "gmm_dump", tmp_path / "gmm_dump"), tmp_path / "sink")
    empty_db.register("loaded", table)
    empty_db.execute("insert into gmm_expert_load by name select 'r' as run, 'c' as capture, 1 as source_id, *"
                     " from loaded")
    # 4 layers x 3 grouped matmuls sharing one routing, forward only, in every capture.
    per_layer = empty_db.sql(
        "select step, role, rank_id, layer, count(distinct op_index), count(distinct op_in_layer),"
        " count(distinct phase) from gmm_layer_load group by all"
    ).fetchall()
    assert len(per_layer) == 2 * 2 * 2 * 4
    assert {r[4:] for r in per_layer} == {(3, 3, 1)}
    assert empty_db.sql("select distinct phase from gmm_layer_load").fetchall() == [("forward",)]
    imbalance = empty_db.sql(
        "select count(*), min(total_tokens), max(total_tokens), min(experts), max(experts) from gmm_imbalance"
    )
    assert imbalance.fetchall()[0] == (96, 4096, 4096, 16, 16)
    # step 1, actor_update, rank 0, op 0: the busiest expert is 10 with 810 of 4096 tokens
    assert empty_db.sql(
        "select hottest_expert, max_tokens, round(max_mean_ratio, 4) from gmm_imbalance"
        " where step = 1 and role = 'actor_update' and rank_id = 0 and op_index = 0"
    ).fetchall()[0] == (10, 810, round(810 / 256, 4))


def test_ops_per_layer_comes_from_the_settings(empty_db):
    empty_db.execute("insert into internal.settings values ('gmm_ops_per_layer', '2')")
    insert_calls(empty_db, "actor_update", 0, {0: [1, 2], 1: [1, 2], 2: [3, 4], 3: [3, 4], 4: [3, 4]})
    rows = empty_db.execute(
        "select distinct op_index, phase, layer, op_in_layer, ops_per_layer from gmm_layer_load order by op_index"
    ).fetchall()
    assert rows == [(0, "forward", 0, 1, 2), (1, "forward", 0, 2, 2), (2, "forward", 1, 1, 2),
                    (3, "forward", 1, 2, 2), (4, "backward", 1, 1, 2)]
