"""A VeRL training console log as wandb saves it (files/output.log), for the demo.

The shape of the real ones in ../shared/fixtures/real/verl-logs: a few trainer lines and
the config, `step:0` holding the initial validation only, then one `step:N - key:value`
record per step with numpy reprs (`np.float64(0.1)`), `Training Progress:` bars between
them, and the validation metrics joining every `val_every`-th record. The phase seconds of
a step given in `phases` are the ones its profile measured, so log and profile agree there.
"""

from __future__ import annotations

import random
from pathlib import Path

# A step's phases in seconds when nothing else says: rollout, old log probs, actor update.
DEFAULT_PHASES = {"gen": 0.9, "old_log_prob": 0.3, "update_actor": 1.2}


def _record(step: int, phases: dict[str, float], rng: random.Random) -> dict[str, str]:
    gen, old, update = (phases[k] for k in ("gen", "old_log_prob", "update_actor"))
    total = gen + old + update + 0.06 + 0.01 * rng.random()
    response = 480 + 15 * step + rng.randrange(0, 20)
    tokens = 8 * (256 + response)
    return {
        "global_seqlen/mean": f"{tokens}",
        "actor/entropy": f"np.float64({0.62 - 0.01 * step + 0.002 * rng.random()!r})",
        "actor/loss": f"np.float64({-0.01 + 0.004 * rng.random()!r})",
        "actor/pg_loss": f"np.float64({-0.012 + 0.004 * rng.random()!r})",
        "actor/grad_norm": f"np.float64({0.21 + 0.05 * rng.random()!r})",
        "actor/lr": "1e-06",
        "critic/score/mean": f"np.float64({0.30 + 0.02 * step + 0.01 * rng.random()!r})",
        "critic/rewards/mean": f"np.float64({0.30 + 0.02 * step + 0.01 * rng.random()!r})",
        "response_length/mean": f"np.float64({float(response)!r})",
        "response_length/clip_ratio": f"np.float64({0.01 * rng.random()!r})",
        "timing_s/gen": f"np.float64({gen!r})",
        "timing_s/old_log_prob": f"np.float64({old!r})",
        "timing_s/update_actor": f"np.float64({update!r})",
        "timing_s/step": f"np.float64({total!r})",
        "perf/total_num_tokens": f"{tokens}",
        "perf/throughput": f"np.float64({tokens / total / 2!r})",
        "perf/max_memory_allocated_gb": f"np.float64({38.5 + 0.1 * rng.random()!r})",
        "training/global_step": f"{step}",
        "training/epoch": "0",
    }


def write_verl_log(path: Path, *, steps: int, phases: dict[int, dict[str, float]] | None = None,
                   val_every: int = 5, seed: int = 0) -> Path:
    """Steps 1..`steps` (and step 0's validation); `phases`: step -> its phase seconds."""
    rng = random.Random(seed)
    lines = [
        "INFO 05-26 08:51:40 verl.trainer.main_ppo: starting TaskRunner (verl 0.5.0)",
        "{'actor_rollout_ref': {'actor': {'ppo_mini_batch_size': 8, 'optim': {'lr': 1e-06}}},",
        " 'trainer': {'total_training_steps': " + str(steps) + ", 'logger': ['console', 'wandb']}}",
        "Checkpoint tracker file does not exist: %s ...",
        "Training from scratch",
        "step:0 - val-core/gsm8k/reward/mean@1:np.float64(0.287)",
    ]
    for step in range(1, steps + 1):
        # Unprofiled steps: generation grows with the responses, with some jitter.
        drift = {k: v * (1 + 0.03 * (step - 2) + 0.02 * rng.random()) if k == "gen" else v
                 for k, v in DEFAULT_PHASES.items()}
        record = _record(step, {**drift, **(phases or {}).get(step, {})}, rng)
        if step % val_every == 0:
            record["val-core/gsm8k/reward/mean@1"] = f"np.float64({0.29 + 0.01 * step!r})"
        lines.append(f"Training Progress:  {100 * (step - 1) // steps}%|          | {step - 1}/{steps}")
        lines.append(f"step:{step} - " + " - ".join(f"{k}:{v}" for k, v in record.items()))
    lines.append(f"Training Progress: 100%|##########| {steps}/{steps}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
