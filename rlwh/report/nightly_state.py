"""What `rlwh nightly` found, kept beside the index (nightly.json).

Its own module so the report code can read it without importing nightly (which imports
the report code): the index lists the regressions of earlier nights from it, and
nightly does not recompute a baseline's metrics while its data is unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE_NAME = "nightly.json"


def load_state(index: Path) -> dict:
    """nightly.json beside the index; {} when missing or unreadable (it is only a cache)."""
    try:
        state = json.loads((Path(index).parent / STATE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(state, dict) or not isinstance(state.get("runs", {}), dict):
        return {}
    return state


def save_state(index: Path, state: dict) -> None:
    """Write the state atomically (a temp file renamed over it)."""
    path = Path(index).parent / STATE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)
