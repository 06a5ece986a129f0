"""The seed's VeRL log checks in `rlwh check` (rlwh.ingest.log_check), on every real log."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from rlwh.cli import cli
from rlwh.ingest.check import check, format_report
from rlwh.ingest.log_check import check_log
from rlwh.ingest.runner import ingest

LOGS = FIXTURES / "real" / "verl-logs"
REAL_LOGS = sorted(LOGS.rglob("output.log"))
SEED_KEYS = ["verl", "actor/loss", "critic/score/mean", "critic/rewards/mean", "response_length/mean",
             "actor/grad_norm", "training/global_step", "training/epoch", "actor/lr", "actor/entropy",
             "Training Progress:"]


def expected_missing(path, keys):
    """What the seed's rules say, from the raw bytes: (is a VeRL log, keys missing)."""
    data = path.read_bytes()
    is_verl = "verl" in path.name.lower() or b"verl" in data[:65536].lower()
    return is_verl, [k for k in keys if k.encode() not in data[: 2 * 1024 * 1024]]


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.parts[-3][-8:])
def test_real_logs_against_the_seed_rules(path):
    is_verl, missing = expected_missing(path, SEED_KEYS)
    verdict = check_log(path, "x.log")
    expected = [] if is_verl else ["x.log: not a VeRL log: no 'verl' in its name or its first 64 KiB"]
    if missing:
        expected.append(f"x.log: required keys missing from its first 2 MiB: {', '.join(missing)}")
    assert verdict.failures == expected
    assert verdict.passed is (not expected)


def test_passes_with_a_loosened_list_and_fails_empty_or_missing(tmp_path):
    log = next(p for p in REAL_LOGS if "wmqmvslz" in str(p))
    assert check_log(log, "a.log", ("verl", "actor/pg_loss", "Training Progress:")).passed
    (tmp_path / "empty.log").write_bytes(b"")
    assert check_log(tmp_path / "empty.log", "empty.log").failures == ["empty.log: empty file"]
    assert check_log(tmp_path / "gone.log", "gone.log").failures == ["gone.log: no such file"]
    (tmp_path / "verl_run.log").write_text("step:1 - actor/loss:1\n")
    # 'verl' in the name makes it a VeRL log; the required key 'verl' is looked for in the text.
    assert check_log(tmp_path / "verl_run.log", "v", ("verl", "actor/loss")).failures == [
        "v: required keys missing from its first 2 MiB: verl"]


def test_check_lists_every_log_and_ingest_still_loads_a_failing_one(tmp_path, config):
    root = tmp_path / "run"
    (root / "logs").mkdir(parents=True)
    shutil.copyfile(next(p for p in REAL_LOGS if "lf03816z" in str(p)), root / "logs" / "sft.log")
    (root / "vllm.log").write_text("INFO engine started\n")
    report = check(root, tuple(SEED_KEYS))
    by_path = {c.path: c for c in report.log_checks}
    assert set(by_path) == {"logs/sft.log", "vllm.log"}
    assert not by_path["logs/sft.log"].passed and not by_path["vllm.log"].passed
    text = format_report(report)
    assert "VeRL log checks (2 logs, 2 failed" in text
    assert "  FAIL  vllm.log: not a VeRL log: no 'verl' in its name or its first 64 KiB" in text
    assert report.failing == 0
    summary = ingest(root, config)
    assert [(r.rel_path, r.status) for r in summary.results] == [("logs/sft.log", "ok")]


def test_cli_check_of_one_log_and_the_list_from_warehouse_toml(tmp_path):
    log = next(p for p in REAL_LOGS if "wmqmvslz" in str(p))
    result = CliRunner().invoke(cli, ["check", str(log)], env={"RLWH_CONFIG": None})
    assert result.exit_code == 4  # exitcodes.LOG_RULES: a failed log rule, nothing else wrong
    assert "required keys missing from its first 2 MiB: actor/loss, training/global_step, training/epoch" \
        in result.output
    toml = tmp_path / "warehouse.toml"
    toml.write_text('[verl_log]\nrequired_keys = ["verl", "actor/pg_loss"]\n')
    result = CliRunner().invoke(cli, ["check", str(log), "--config", str(toml)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"PASS  {log}"
    toml.write_text("[verl_log]\nrequired_keys = 3\n")
    result = CliRunner().invoke(cli, ["check", str(log), "--config", str(toml)])
    assert result.exit_code == 1 and "required_keys = 3 is not a valid list of strings" in result.output


def test_a_failed_log_rule_gives_check_its_own_exit_status(tmp_path):
    """A CI step running `rlwh check` notices a log that fails the rules: exit 4, while the
    files themselves would all load (an ingest of the same folder exits 0)."""
    root = tmp_path / "run"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "empty_verl.log").write_bytes(b"")
    (root / "logs" / "train.log").write_text("step:1 - actor/pg_loss:0.1 - critic/score/mean:0.5\n")
    env = {"RLWH_CONFIG": None, "RLWH_DB": str(tmp_path / "w.duckdb")}
    checked = CliRunner().invoke(cli, ["check", str(root)], env=env)
    assert checked.exit_code == 4, checked.output
    assert "FAIL  logs/empty_verl.log: empty file" in checked.output
    assert "FAIL  logs/train.log: required keys missing" in checked.output
    ingested = CliRunner().invoke(cli, ["ingest", str(root), "--db", str(tmp_path / "w.duckdb")], env=env)
    assert ingested.exit_code == 0, ingested.output


def test_check_of_one_profiler_file_says_to_point_at_its_folder(tmp_path):
    """`rlwh check FILE` runs the training-log rules; a profiler file (an Ascend trace and
    memory CSV, a Kineto trace) is no log that failed them but a file to check from its
    folder, and a log named like nothing rlwh reads still gets the log rules."""
    from rlwh import synth

    profile = synth.write_ascend_profile(tmp_path / "run", roles=("actor_update",), ranks=1, n_ops=20,
                                         n_allocs=5, n_stacks=2)
    kineto = next((FIXTURES / "real" / "kineto").rglob("*.pt.trace.json*"))
    for path, kind in ((next(profile.rglob("trace_view.json")), "ascend_trace"),
                       (next(profile.rglob("operator_memory.csv")), "ascend_memory_csv"), (kineto, "torch_trace")):
        result = CliRunner().invoke(cli, ["check", str(path)], env={"RLWH_CONFIG": None})
        assert result.exit_code == 1, result.output
        assert f"{path} is a profiler file ({kind}), not a training log: point `rlwh check` at the folder" \
            in result.output
    notes = tmp_path / "notes.txt"
    notes.write_text("nothing of a trainer\n")
    result = CliRunner().invoke(cli, ["check", str(notes)], env={"RLWH_CONFIG": None})
    assert result.exit_code == 4 and "not a VeRL log" in result.output
