"""Settings from warehouse.toml, overridden by flags and RLWH_DB.

Relative paths resolve against the folder of the file that names them, so a cron job
started from anywhere finds the same warehouse.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import tomllib

from rlwh.errors import ConfigError
from rlwh.stacks import DEFAULT_LIBRARY_FRAMES, library_pattern

CONFIG_NAME = "warehouse.toml"
EXECUTORS = ("local", "ray")
# The seed's list of what a VeRL PPO/GRPO log must show (`rlwh check`; [verl_log] required_keys).
DEFAULT_REQUIRED_KEYS = (
    "verl", "actor/loss", "critic/score/mean", "critic/rewards/mean", "response_length/mean", "actor/grad_norm",
    "training/global_step", "training/epoch", "actor/lr", "actor/entropy", "Training Progress:",
)
# The training-log metrics the regression rule watches ([verl_log] regression_metrics).
DEFAULT_TRAIN_METRICS = ("timing_s/step", "perf/throughput", "perf/max_memory_allocated_gb", "response_length/mean")


@dataclass(frozen=True)
class Config:
    db_path: Path = Path("warehouse.duckdb")
    dataset: Path | None = None  # dataset mode: the Parquet dataset db_path is a thin file over
    threads: int = 2
    memory_limit: str = "1GB"
    workers: int = 2
    pool_min_bytes: int = 16 * 1024 * 1024  # tasks reading less than this together parse in-process
    executor: str = "local"  # local | ray: where parse tasks run
    ray_address: str | None = None  # a Ray cluster's address; None: RAY_ADDRESS, else "auto"
    derive_in_workers: bool = False  # build whole captures in the workers (always with Ray)
    worker_memory_limit: str = "256MB"
    ingest_memory_limit: str = "512MB"
    lock_timeout: float = 600.0
    reports_dir: Path = Path("reports_out")
    nightly_root: Path = Path("profiles")
    nightly_index: Path = Path("reports_out/index.html")
    peak_memory_pct: float = 10.0
    role_span_pct: float = 10.0
    straggler_wait_ms: float = 1.0  # stragglers.is_straggler: others waited for the rank longer than this
    kernel_wait_ns: int = 30_000  # device_idle: a shorter gap before a queued kernel is launch overhead (HTA: 30 us)
    ops_per_layer: int = 3
    usage_component: str = "PTA+GE"
    library_frames: tuple[str, ...] = DEFAULT_LIBRARY_FRAMES
    stdlib_is_library: bool = True
    verl_log_required_keys: tuple[str, ...] = DEFAULT_REQUIRED_KEYS  # the seed's VeRL log check
    train_metrics: tuple[str, ...] = DEFAULT_TRAIN_METRICS  # log metrics nightly and compare check
    higher_is_better: tuple[str, ...] = ("perf/throughput",)  # of those, the ones that regress downward
    train_metric_pct: float = 10.0
    roles: tuple[tuple[str, str], ...] = ()  # [roles]: (folder name or glob, role), in the order written
    source: Path | None = field(default=None, compare=False)

    @property
    def library_pattern(self) -> str:
        """The [stacks] rule as one regular expression (see rlwh.stacks)."""
        return library_pattern(self.library_frames, self.stdlib_is_library)

    def view_settings(self) -> dict[str, str]:
        """The settings the views read, as stored in internal.settings (name -> text): a warehouse
        and a dataset's thin file alike."""
        return {"gmm_ops_per_layer": str(self.ops_per_layer), "library_frames": self.library_pattern,
                "straggler_wait_ns": str(round(self.straggler_wait_ms * 1_000_000)),
                "kernel_wait_ns": str(self.kernel_wait_ns)}

    def with_db(self, db: str | os.PathLike | None) -> "Config":
        """This config with another warehouse file (a --db flag), when one is given."""
        return replace(self, db_path=Path(db).resolve()) if db else self


def _patterns(raw) -> tuple[str, ...]:
    """A list of regular expressions, each checked to compile."""
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise ValueError("expected a list of strings")
    for pattern in raw:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from exc
    return tuple(raw)


def _boolean(raw) -> bool:
    if not isinstance(raw, bool):
        raise ValueError("expected true or false")
    return raw


def _strings(raw) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise ValueError("expected a list of non-empty strings")
    return tuple(raw)


def _memory_size(raw) -> str:
    """A memory limit DuckDB accepts ("768MB", "1.5GB", "2GiB"), checked by DuckDB itself: a
    bad one failed only once a connection applied it, with a parser traceback."""
    if not isinstance(raw, str):
        raise ValueError("expected text such as \"768MB\"")
    problem = _memory_size_problem(raw)
    if problem is not None:
        raise ValueError(problem)
    return raw


@functools.lru_cache(maxsize=64)
def _memory_size_problem(raw: str) -> str | None:
    """DuckDB's complaint about a memory limit, or None; asked once per text and process (a
    config file may set three limits)."""
    from rlwh.process_db import memory_limit_problem

    return memory_limit_problem(raw)


_memory_size.__name__ = 'memory size (a number and a unit, e.g. "768MB" or "2GB")'
_patterns.__name__ = "list of regular expressions"
_strings.__name__ = "list of strings"
_boolean.__name__ = "boolean"

_KEYS: dict[tuple[str, str], tuple[str, Callable[[Any], Any]]] = {
    ("warehouse", "path"): ("db_path", Path),
    ("warehouse", "dataset"): ("dataset", Path),
    ("warehouse", "threads"): ("threads", int),
    ("warehouse", "memory_limit"): ("memory_limit", _memory_size),
    ("ingest", "workers"): ("workers", int),
    ("ingest", "pool_min_bytes"): ("pool_min_bytes", int),
    ("ingest", "executor"): ("executor", str),
    ("ingest", "ray_address"): ("ray_address", str),
    ("ingest", "derive_in_workers"): ("derive_in_workers", _boolean),
    ("ingest", "worker_memory_limit"): ("worker_memory_limit", _memory_size),
    ("ingest", "memory_limit"): ("ingest_memory_limit", _memory_size),
    ("ingest", "lock_timeout"): ("lock_timeout", float),
    ("reports", "dir"): ("reports_dir", Path),
    ("reports", "memory_usage_component"): ("usage_component", str),
    ("nightly", "root"): ("nightly_root", Path),
    ("nightly", "index"): ("nightly_index", Path),
    ("thresholds", "peak_memory_pct"): ("peak_memory_pct", float),
    ("thresholds", "role_span_pct"): ("role_span_pct", float),
    ("thresholds", "straggler_wait_ms"): ("straggler_wait_ms", float),
    ("thresholds", "kernel_wait_ns"): ("kernel_wait_ns", int),
    ("gmm", "ops_per_layer"): ("ops_per_layer", int),
    ("stacks", "library_frames"): ("library_frames", _patterns),
    ("stacks", "stdlib_is_library"): ("stdlib_is_library", _boolean),
    ("verl_log", "required_keys"): ("verl_log_required_keys", _strings),
    ("verl_log", "regression_metrics"): ("train_metrics", _strings),
    ("verl_log", "higher_is_better"): ("higher_is_better", _strings),
    ("thresholds", "train_metric_pct"): ("train_metric_pct", float),
}


def _roles(raw, file: Path) -> tuple[tuple[str, str], ...]:
    """[roles]: folder name or glob -> role, each a non-empty string."""
    if not isinstance(raw, dict):
        raise ConfigError(f'{file}: [roles] must be a table of "folder name or glob" = "role" lines')
    for pattern, role in raw.items():
        if not isinstance(role, str) or not role.strip() or not pattern.strip():
            raise ConfigError(f'{file}: [roles] {pattern!r} = {role!r}: write "folder name or glob" = "role", '
                              "both non-empty text")
    return tuple(raw.items())


def find_config_file(explicit: str | os.PathLike | None = None) -> Path | None:
    """--config, else RLWH_CONFIG, else warehouse.toml in the current folder."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    env = os.environ.get("RLWH_CONFIG")
    if env:
        if not Path(env).is_file():
            raise ConfigError(f"RLWH_CONFIG names a missing file: {env}")
        return Path(env)
    here = Path.cwd() / CONFIG_NAME
    return here if here.is_file() else None


def load_config(path: str | os.PathLike | None = None, db: str | os.PathLike | None = None) -> Config:
    """Read settings; `db` (a --db flag) wins over RLWH_DB, which wins over the file."""
    file = find_config_file(path)
    values: dict = {}
    base = Path.cwd()
    if file is not None:
        base = file.resolve().parent
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read {file}: {exc}") from exc
        for (section, key), (attr, kind) in _KEYS.items():
            if key in data.get(section, {}):
                raw = data[section][key]
                try:
                    values[attr] = kind(raw)
                except (TypeError, ValueError) as exc:
                    raise ConfigError(f"{file}: [{section}] {key} = {raw!r} is not a valid {kind.__name__}") from exc
        if "roles" in data:
            values["roles"] = _roles(data["roles"], file)
    for attr, value in list(values.items()):
        if isinstance(value, Path) and not value.is_absolute():
            values[attr] = base / value
    config = Config(source=file, **values)
    defaults = {a: getattr(config, a) for a in ("db_path", "reports_dir", "nightly_root", "nightly_index")}
    for attr, value in defaults.items():
        if not value.is_absolute():
            config = replace(config, **{attr: base / value})
    if config.workers < 1 or config.threads < 1:
        raise ConfigError("threads and workers must be at least 1")
    if config.executor not in EXECUTORS:
        raise ConfigError(f"[ingest] executor = {config.executor!r}: expected one of {', '.join(EXECUTORS)}")
    return config.with_db(db or os.environ.get("RLWH_DB"))


def settings_for(db=None, config=None, workers=None) -> Config:
    """The Python API's settings: the config file's (or RLWH_CONFIG's), with `db` (else
    RLWH_DB) and `workers` winning, as the CLI's --db does."""
    settings = load_config(config, db)
    if workers is not None:
        settings = replace(settings, workers=int(workers))
    return settings
