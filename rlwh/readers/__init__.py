"""Readers: pure functions from one source file to Arrow data (see base.py)."""
