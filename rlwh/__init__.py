"""rlwh: a DuckDB warehouse for distributed RL training profiles."""

__version__ = "0.1.0"
