"""gmm_layer_load: each grouped-matmul call's MoE layer and pass, against the documented rule
replayed in Python on generated dumps (forward layers, the backward pass reusing their
routing, missing op indexes, a backward routing no forward layer had, a role without a
backward pass and msprobe's role-less layout)."""

from __future__ import annotations

import random

from conftest import insert_rows

OPS_PER_LAYER = 3  # the default of [gmm] ops_per_layer


def _calls(rng: random.Random, training: bool) -> dict[int, list[int]]:
    """op_index -> tokens by expert."""
    layers = [[rng.randrange(0, 100) for _ in range(4)] for _ in range(rng.randrange(2, 5))]
    sequence = [load for load in layers for _ in range(OPS_PER_LAYER)]
    if training:
        sequence += [load for load in reversed(layers) for _ in range(OPS_PER_LAYER)]
        sequence += [[1, 2, 3, 4]] * 2  # a backward routing no forward layer had
    calls, index = {}, 0
    for load in sequence:
        index += 1 + (rng.random() < 0.08)  # now and then an op_index is missing
        calls[index] = load
    return calls


def _expected(calls: dict[int, list[int]], training: bool) -> dict[int, tuple]:
    """op_index -> (phase, layer, op_in_layer)."""
    order = sorted(calls)
    position, positions = 0, {}
    for i, op in enumerate(order):
        new_run = i == 0 or calls[op] != calls[order[i - 1]] or op != order[i - 1] + 1
        position = 1 if new_run else position + 1
        positions[op] = position
    longer = [op for op in order if positions[op] > OPS_PER_LAYER]
    backward_start = min(longer) if training and longer else None
    result, layer, forward_layer_of = {}, -1, {}
    for op in order:
        in_layer = (positions[op] - 1) % OPS_PER_LAYER + 1
        if backward_start is None or op < backward_start:
            layer += in_layer == 1
            forward_layer_of.setdefault(tuple(calls[op]), layer)
            result[op] = ("forward", layer, in_layer)
        else:
            result[op] = ("backward", forward_layer_of.get(tuple(calls[op])), in_layer)
    return result


def test_layers_and_passes(attached_db):
    rng = random.Random(41)
    rows, expected = [], {}
    for role in ("actor_update", "ref", None):
        for rank in (0, 1):
            for step in (1, 2):
                training = role is not None and role.endswith("_update")
                calls = _calls(rng, training)
                for op, (phase, layer, in_layer) in _expected(calls, training).items():
                    for expert, tokens in enumerate(calls[op]):
                        rows.append((role, rank, step, op, expert, tokens))
                        expected[(role, rank, step, op, expert)] = (phase, layer, in_layer, tokens, OPS_PER_LAYER)
    insert_rows(attached_db, "gmm_expert_load", ["role", "rank_id", "step", "op_index", "expert", "tokens"], rows,
                run="r", capture="dump", source_id=1)
    got = attached_db.execute("""select role, rank_id, step, op_index, expert, phase, layer, op_in_layer, tokens,
                                     ops_per_layer
                              from gmm_layer_load where run = 'r'""").fetchall()
    assert {tuple(r[:5]): tuple(r[5:]) for r in got} == expected and len(got) == len(expected)
    phases = {v[0] for v in expected.values()}
    assert phases == {"forward", "backward"} and any(v[1] is None for v in expected.values())
