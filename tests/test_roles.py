"""Roles mean roles (issue 41 item 3): a profiler-level folder (level1) is no role, the user
can say the role (`--role`, warehouse.toml's [roles]), and NVTX ranges are phases inside
their export's role: `rlwh check`, `rlwh summary` and `rlwh compare` list the same roles,
and no range name among them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import DATA, SAMPLES

from rlwh.cli import cli
from rlwh.config import load_config
from rlwh.errors import ConfigError, RlwhError
from rlwh.ingest.check import check
from rlwh.ingest.discover import RoleRules
from rlwh.ingest.runner import ingest
from rlwh.report.summary import summarize

MEMORY_CAPTURE = SAMPLES / "memory_data" / "20260526_085155_ascend_pt"
NVTX_DIR = SAMPLES / "nvtx_data" / "nvtx_profile"
GMM_RANK = DATA / "gmm_dump" / "step_2" / "actor_update" / "rank1"


def _range_names() -> set[str]:
    """The names of the NVTX ranges of the exports, read from the raw jsonl lines."""
    names = set()
    for path in NVTX_DIR.glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        strings = {r["id"]: r["value"] for r in rows if r.get("table") == "StringIds"}
        names |= {strings[r["textId"]] for r in rows if r.get("table") == "NVTX_EVENTS" and "textId" in r}
    return names


def _profile(tmp_path: Path) -> Path:
    """An Ascend capture below its role and a profiler-level folder (actor_update/level1/), and a
    colocated worker's NVTX exports in their role's folder (nsys/actor_rollout_ref/)."""
    root = tmp_path / "grpo"
    shutil.copytree(MEMORY_CAPTURE, root / "actor_update" / "level1" / MEMORY_CAPTURE.name)
    shutil.copytree(NVTX_DIR, root / "nsys" / "actor_rollout_ref")
    return root


def _roles(db: Path, run: str, *tables: str) -> dict[str, set[str | None]]:
    """The roles of `run` in each of `tables`, read on one connection (an open costs ~25 ms)."""
    with duckdb.connect(str(db), read_only=True) as con:
        return {table: {r for (r,) in con.execute(f"select distinct role from {table} where run = ?", [run]).fetchall()}
                for table in tables}


def _check_roles(output: str) -> set[str]:
    """The roles of `rlwh check`'s table (the lines from its "role ranks" header to the blank line)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["role", "ranks"])
    rows = lines[start + 1:lines.index("", start)]
    return {line.split()[0] for line in rows}


@pytest.mark.slow
def test_check_summary_and_compare_list_the_same_roles_and_no_range_name(tmp_path, config):
    names = _range_names()
    assert len(names) >= 3  # compute_log_prob, compute_values, update_critic, ...
    root = _profile(tmp_path)
    checked = {row["role"] for row in check(root).roles()}
    assert checked == {"actor_update", "actor_rollout_ref"}  # not level1, no range name
    assert ingest(root, config, run="a").failed == 0
    assert ingest(root, config, run="b").failed == 0
    summary = summarize(config, "a")
    listed = summary.sections[0].result
    assert {row[listed.columns.index("role")] for row in listed.rows} == checked
    per_rank = summary.sections[1].result
    assert {row[per_rank.columns.index("role")] for row in per_rank.rows} == checked
    for table, roles in _roles(config.db_path, "a", "ranges", "role_timeline", "rank_skew", "phase_device_time",
                               "sources").items():
        assert not names & roles, table
    # The ranges are there, each a phase of the worker's role.
    con = duckdb.connect(str(config.db_path), read_only=True)
    phases = set(con.execute("select distinct name from ranges where run = 'a' and source = 'nvtx' "
                             "and role = 'actor_rollout_ref'").fetchall())
    con.close()
    assert {p for (p,) in phases} == names
    compared = CliRunner().invoke(cli, ["compare", "a", "b", "--db", str(config.db_path), "--format", "csv"])
    assert compared.exit_code == 0, compared.output
    rows = [line.split(",") for line in compared.output.splitlines()]
    header = next(r for r in rows if "role" in r)
    roles = {r[header.index("role")] for r in rows[rows.index(header) + 1:] if len(r) == len(header)}
    assert roles == checked


def test_role_flag_names_every_file_and_changing_it_reloads(tmp_path, config):
    root = _profile(tmp_path)
    shutil.copytree(GMM_RANK, root / "gmm" / "step_2" / "actor_update" / "rank1")
    assert {row["role"] for row in check(root, roles=RoleRules("actor")).roles()} == {"actor"}
    first = ingest(root, config, run="r", role="actor")
    assert first.failed == 0
    for table, roles in _roles(config.db_path, "r", "sources", "ranges", "memory_records", "cpu_ops",
                               "gmm_expert_load", "role_timeline").items():
        assert roles - {None} == {"actor"}, table
    # Without --role the same unchanged files are read again, under the folders' roles.
    again = ingest(root, config, run="r")
    assert again.count("unchanged") == 0 and again.failed == 0
    assert _roles(config.db_path, "r", "ranges", "memory_records", "gmm_expert_load") == {
        "ranges": {"actor_rollout_ref"}, "memory_records": {"actor_update"}, "gmm_expert_load": {"actor_update"}}
    assert ingest(root, config, run="r").count("unchanged") == len(again.results)


def test_role_flag_on_the_command_line(tmp_path):
    root = _profile(tmp_path)
    db = tmp_path / "wh.duckdb"
    checked = CliRunner().invoke(cli, ["check", str(root), "--role", "learner"])
    assert checked.exit_code == 0, checked.output
    assert _check_roles(checked.output) == {"learner"}
    loaded = CliRunner().invoke(cli, ["ingest", str(root), "--role", "learner", "--db", str(db), "-q"])
    assert loaded.exit_code == 0, loaded.output
    assert _roles(db, "grpo", "sources") == {"sources": {"learner"}}
    empty = CliRunner().invoke(cli, ["ingest", str(root), "--role", " ", "--db", str(db)])
    assert empty.exit_code != 0 and "--role must not be empty" in empty.output


def test_roles_mapping_in_warehouse_toml(tmp_path, config):
    root = _profile(tmp_path)
    toml = tmp_path / "warehouse.toml"
    toml.write_text('[roles]\n"actor_rollout_*" = "rollout"\n"level?" = "actor"\n"grpo" = "trainer"\n')
    roles = load_config(toml).roles
    assert roles == (("actor_rollout_*", "rollout"), ("level?", "actor"), ("grpo", "trainer"))
    # The nearest folder a pattern matches wins: level1 below actor_update, actor_rollout_ref.
    assert {row["role"] for row in check(root, roles=RoleRules(None, roles)).roles()} == {"actor", "rollout"}
    checked = CliRunner().invoke(cli, ["check", str(root), "--config", str(toml)])
    assert _check_roles(checked.output) == {"actor", "rollout"}
    assert ingest(root, replace(config, roles=roles), run="m").failed == 0
    assert _roles(config.db_path, "m", "sources") == {"sources": {"actor", "rollout"}}
    # --role wins over the mapping.
    assert {row["role"] for row in check(root, roles=RoleRules("solo", roles)).roles()} == {"solo"}


@pytest.mark.parametrize("text", ['[roles]\n"x" = 3\n', '[roles]\n"x" = ""\n', 'roles = "x"\n'])
def test_a_bad_roles_mapping_is_one_line_naming_the_file(tmp_path, text):
    toml = tmp_path / "warehouse.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError, match=r"warehouse\.toml: \[roles\]") as caught:
        load_config(toml)
    assert "\n" not in str(caught.value)


def test_migration_0017_rereads_what_the_release_before_gave_other_roles(tmp_path, config):
    """Before 0017 an NVTX range's role was its name and a capture under level1/ had role
    level1; an unchanged file is skipped, so the migration marks those files for reading again."""
    from rlwh.warehouse.schema import migrate

    root = _profile(tmp_path)
    first = ingest(root, config, run="old")
    assert first.failed == 0
    con = duckdb.connect(str(config.db_path))
    # As the release before left them.
    con.execute("update ranges set role = name where source = 'nvtx'")
    con.execute("update sources set role = null where kind = 'nvtx_jsonl'")
    for table in ("sources", "memory_records", "cpu_ops"):
        con.execute(f"update {table} set role = 'level1' where role = 'actor_update'")
    con.execute("delete from internal.migrations where name like '0017%'")
    assert migrate(con) == ["0017_nvtx_ranges_are_phases.sql"]
    con.close()
    assert _roles(config.db_path, "old", "ranges") == {"ranges": _range_names()}
    again = ingest(root, config, run="old")
    assert again.failed == 0 and again.count("unchanged") == 0
    assert _roles(config.db_path, "old", "ranges", "memory_records", "sources") == {
        "ranges": {"actor_rollout_ref"}, "memory_records": {"actor_update"},
        "sources": {"actor_rollout_ref", "actor_update"}}


def test_role_folders_with_the_same_file_names_under_one_run_are_refused_not_merged(tmp_path, config):
    """Two role folders each holding rank0/trace.json, ingested under one --run: the second
    replaced the first's rows without a word (a file is told apart by its path under the
    folder ingested). Now it is refused before anything is written, saying what to do; the
    same folder moved elsewhere, its files unchanged, re-ingests as before."""
    traces = sorted((DATA / "real" / "kineto" / "hta").rglob("*.json.gz"))[:2]
    assert len(traces) == 2
    for role, trace in zip(("actor", "ref"), traces):
        (tmp_path / role / "rank0").mkdir(parents=True)
        shutil.copy(trace, tmp_path / role / "rank0" / "prof_rank-0.pt.trace.json.gz")
    first = ingest(tmp_path / "actor", config, run="R", role="actor")
    assert first.failed == 0 and first.rows > 0

    def rows() -> list[tuple]:
        con = duckdb.connect(str(config.db_path), read_only=True)
        try:
            return con.execute("select role, path, rows from sources order by all").fetchall()
        finally:
            con.close()

    before = rows()
    with pytest.raises(RlwhError, match=r"a different file under the same path, rank0/prof_rank-0.pt.trace.json.gz"):
        ingest(tmp_path / "ref", config, run="R", role="ref")
    assert rows() == before
    shutil.copytree(tmp_path / "actor", tmp_path / "moved")
    again = ingest(tmp_path / "moved", config, run="R", role="actor")
    assert again.count("unchanged") == len(again.results) == 1 and rows() == before
