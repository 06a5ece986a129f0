"""Parquet outside the DuckDB file: the dataset warehouse mode and `rlwh export parquet`."""
