"""Stack texts are normalized once (issue 37 item 3): a warehouse keeps, for each raw
call-stack text of a trace_view.json, the call_stacks row it normalized to
(internal.stack_texts), and a later batch takes known texts from there. Expectations come
from the raw file, read with json; the normalization rule is written out here."""

from __future__ import annotations

import hashlib
import json
import re
import shutil

import duckdb
import pytest
from conftest import copy_fixture

from rlwh.ingest.runner import ingest

RANK = "real/ascend/msinsight-alexnet-level1/text/rank0_ascend_pt"


def normalized(text: str) -> str | None:
    """Each line without leading blanks and trailing blanks or ';', blank lines dropped."""
    lines = [re.sub(r"[ \t\r]*;*[ \t\r]*$", "", re.sub(r"^[ \t\r]+", "", line)) for line in text.split("\n")]
    kept = "\n".join(line for line in lines if line)
    return kept or None


def raw_stacks(profile) -> list[str]:
    """The call stack of every cpu_op of the profile's trace, in file order."""
    (trace,) = profile.rglob("trace_view.json")
    events = json.loads(trace.read_text(encoding="utf-8"))
    return [e["args"]["Call stack"] for e in events
            if e.get("cat") == "cpu_op" and (e.get("args") or {}).get("Call stack") is not None]


def md5_bytes(text: str) -> bytes:
    return hashlib.md5(text.encode("utf-8")).digest()


@pytest.fixture
def profile(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    return copy_fixture(RANK, run).parent


def test_every_raw_text_is_kept_with_the_stack_it_normalizes_to(profile, config):
    ingest(profile, config, run="a")
    texts = set(raw_stacks(profile))
    assert len(texts) > 10
    con = duckdb.connect(str(config.db_path), read_only=True)
    kept = dict(con.execute("select k.text_md5, c.stack from internal.stack_texts as k "
                            "join call_stacks as c using (stack_id)").fetchall())
    assert len(kept) == len(texts)
    for text in texts:
        assert kept[md5_bytes(text)] == normalized(text)


def test_a_later_batch_takes_known_texts_from_the_warehouse(profile, config, tmp_path):
    ingest(profile, config, run="a")
    stacks = raw_stacks(profile)
    poisoned, unknown = sorted(set(stacks), key=stacks.count)[-2:]  # the two most used texts
    con = duckdb.connect(str(config.db_path))
    (other_id,) = con.execute("select min(stack_id) from call_stacks where stack <> ?",
                              [normalized(poisoned)]).fetchone()
    (true_id,) = con.execute("select stack_id from call_stacks where stack = ?", [normalized(unknown)]).fetchone()
    # A known text is taken as the cache says (proof that it is not normalized again); an
    # entry naming no call_stacks row is not trusted, and its text is normalized.
    con.execute("update internal.stack_texts set stack_id = ? where text_md5 = ?",
                [other_id, md5_bytes(poisoned)])
    con.execute("update internal.stack_texts set stack_id = 12345 where text_md5 = ?", [md5_bytes(unknown)])
    con.close()
    again = tmp_path / "again"
    shutil.copytree(profile, again)
    ingest(again, config, run="b")
    con = duckdb.connect(str(config.db_path), read_only=True)
    counts = dict(con.execute("select stack_id, count(*) from cpu_ops where run = 'b' group by all").fetchall())
    assert counts[other_id] >= stacks.count(poisoned)
    assert counts[true_id] == stacks.count(unknown)
    assert 12345 not in counts
