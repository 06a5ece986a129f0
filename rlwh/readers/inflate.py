"""Inflating a damaged gzip stream up to its damage, to the byte.

Why: zlib raises for the whole input it was handed, and what it had inflated from that
input is lost with it: a 7 KB trace damaged a third of the way in inflated to nothing.
A copy of the inflater from before, handed ever smaller parts of that input, keeps every
byte before the damage; so the trace reader and `rlwh check` stop at the same byte.
"""

from __future__ import annotations

import zlib


def salvage(saved, data: bytes) -> bytes:
    """What `saved` (a copy of an inflater taken before `data` was given to it) inflates
    from `data` before the input byte it fails on."""
    out = bytearray()
    at, step = 0, len(data)
    inflater = saved
    while at < len(data) and step and not inflater.eof:
        trial = inflater.copy()
        try:
            got = trial.decompress(data[at:at + step])
        except zlib.error:
            step //= 2
            continue
        out += got
        inflater, at = trial, at + step
    return bytes(out)
