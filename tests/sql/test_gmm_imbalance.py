"""gmm_imbalance: per grouped-matmul call, how evenly tokens spread over the experts, against
the statistics module."""

from __future__ import annotations

import random
import statistics

from conftest import insert_rows


def _loads(seed: int) -> list[tuple]:
    """(role, rank_id, step, op_index, expert, tokens); msprobe's layout has no role (None)."""
    rng = random.Random(seed)
    rows = []
    for role in ("actor_update", None):
        for rank in (0, 1):
            for step in (1, 2):
                for op in range(5):
                    experts = rng.choice([4, 8])
                    shape = rng.choice(["random", "even", "empty", "tie"])
                    for expert in range(experts):
                        tokens = {"random": rng.randrange(0, 300), "even": 16, "empty": 0,
                                  "tie": 50 if expert in (1, 3) else 5}[shape]
                        rows.append((role, rank, step, op, expert, tokens))
    return rows


def test_call_statistics(attached_db):
    rows = _loads(31)
    insert_rows(attached_db, "gmm_expert_load", ["role", "rank_id", "step", "op_index", "expert", "tokens"], rows,
                run="r", capture="dump", source_id=1)
    calls = {}
    for role, rank, step, op, expert, tokens in rows:
        calls.setdefault((role, rank, step, op), {})[expert] = tokens
    expected = {}
    for (role, rank, step, op), load in calls.items():
        tokens = list(load.values())
        mean = statistics.fmean(tokens)
        hottest = min(e for e, t in load.items() if t == max(tokens))
        expected[(role, rank, step, op)] = (len(tokens), sum(tokens), max(tokens), mean,
                                            max(tokens) / mean if mean else None,
                                            statistics.pstdev(tokens) / mean if mean else None, hottest)
    got = attached_db.execute("""select role, rank_id, step, op_index, experts, total_tokens, max_tokens, mean_tokens,
                                     max_mean_ratio, cv, hottest_expert, run
                              from gmm_imbalance""").fetchall()
    assert len(got) == len(expected) and {r[-1] for r in got} == {"r"}
    for role, rank, step, op, *values, _run in got:
        want = expected[(role, rank, step, op)]
        assert values[:3] == list(want[:3]) and values[6] == want[6], (role, rank, step, op)
        for value, wanted in zip(values[3:6], want[3:6]):
            assert (value is None) == (wanted is None) and (wanted is None or abs(value - wanted) < 1e-9), \
                (role, rank, step, op, values, want)
