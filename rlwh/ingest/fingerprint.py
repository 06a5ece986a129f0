"""A cheap file fingerprint: size, mtime and a hash of the first and last 64 KiB.

Reading whole multi-GB traces to decide that nothing changed would make re-ingest as
slow as ingest; size + mtime + head/tail catches rewrites, appends and truncations.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

SAMPLE = 65536


def fingerprint(path: Path) -> tuple[str, int, float]:
    """(fingerprint, size in bytes, mtime in seconds) of a file."""
    st = os.stat(path)
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        digest.update(handle.read(SAMPLE))
        if st.st_size > SAMPLE:
            handle.seek(max(SAMPLE, st.st_size - SAMPLE))
            digest.update(handle.read(SAMPLE))
    return f"{st.st_size}:{st.st_mtime_ns}:{digest.hexdigest()}", st.st_size, st.st_mtime
