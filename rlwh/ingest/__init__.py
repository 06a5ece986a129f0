"""The ingest pipeline: discover -> sniff -> plan -> parse (in executors) -> load or build -> derive.

runner is `rlwh ingest`; check is `rlwh check`, the same discovery without writing.
"""
