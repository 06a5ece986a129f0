"""Tile a real Kineto trace to a chosen size, for benchmarks.

Why: real traces of 1 GB+ cannot live in the repo, and a generated one has a generator's
shape. This repeats a real trace's events, each copy shifted in time by a whole number of
ns past the end of the one before (ts rewritten from the exact integer ns, three decimals,
as Kineto writes them), with its python ids and correlation ids shifted too, so that every
copy nests, pairs and links as the original does. The keys before and after traceEvents
are kept once. Memory stays flat: a copy is written event by event.

Usage: python bench/tile_torch_trace.py SRC(.json[.gz]) OUT.json SIZE_MB
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

_TS = "\x00ts\x00"  # stands for the shifted ts in an event's text until it is written
_SHIFTED_IDS = (("args", "Python id"), ("args", "Python parent id"), ("args", "correlation"),
                ("args", "External id"))


_NUMBER = "\x01"  # marks a non-integral number's text, parsed as a string, so it is written as read
_RAW = re.compile(r'"\\u0001([^"]*)"')


def _number(text: str) -> str:
    return _NUMBER + text


def _is_time(v) -> bool:
    return isinstance(v, int) or (isinstance(v, str) and v.startswith(_NUMBER))


def _ns(us) -> int:
    return us * 1000 if isinstance(us, int) else int(Decimal(us[1:]) * 1000)


def _dumps(v) -> str:
    return _RAW.sub(r"\1", json.dumps(v, separators=(", ", ": ")))


def _us(ns: int) -> str:
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def tile(src: Path, out: Path, size_bytes: int) -> dict:
    """Write `out` of about size_bytes from copies of src's events; returns counts."""
    opener = gzip.open if src.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(src, "rb") as f:
        trace = json.loads(f.read(), parse_float=_number)
    events = trace.pop("traceEvents")
    timed = [e for e in events if isinstance(e, dict) and _is_time(e.get("ts"))]
    start = min(_ns(e["ts"]) for e in timed if e.get("ph") != "M")
    end = max(_ns(e["ts"]) + (_ns(e["dur"]) if _is_time(e.get("dur")) else 0) for e in timed if e.get("ph") != "M")
    span = end - start + 1_000_000  # a ms between copies
    widths = {}
    for outer, key in _SHIFTED_IDS:
        ids = [e[outer][key] for e in events if isinstance(e.get(outer), dict) and isinstance(e[outer].get(key), int)]
        widths[key] = max(ids, default=0) + 1
    texts = []  # (event text with the ts placeholder, its ts in ns or None, its ids)
    for e in events:
        ns = _ns(e["ts"]) if isinstance(e, dict) and _is_time(e.get("ts")) else None
        body = dict(e, ts=_TS) if ns is not None else e
        ids = [k for o, k in _SHIFTED_IDS if isinstance(e, dict) and isinstance(e.get(o), dict)
               and isinstance(e[o].get(k), int)]
        texts.append((_dumps(body), ns, ids, e))
    head = {k: v for k, v in trace.items()}
    copies = 0
    with open(out, "w") as w:
        w.write("{" + "".join(f"{json.dumps(k)}: {_dumps(v)}, " for k, v in head.items())
                + '"traceEvents": [\n')
        first = True
        while w.tell() < size_bytes:
            shift = copies * span
            for text, ns, ids, e in texts:
                if ids:  # a copy's ids shifted past the last copy's
                    args = dict(e["args"])
                    for k in ids:
                        args[k] = args[k] + copies * widths[k]
                    text = _dumps(dict(e, args=args, ts=_TS) if ns is not None else dict(e, args=args))
                if ns is not None:
                    text = text.replace(json.dumps(_TS), _us(ns + shift), 1)
                w.write(text if first else ",\n" + text)
                first = False
            copies += 1
        w.write("\n]}\n")
    return {"copies": copies, "events": copies * len(events), "span_ns": span}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("size_mb", type=float)
    args = ap.parse_args()
    print(json.dumps(tile(args.src, args.out, int(args.size_mb * 1e6))))


if __name__ == "__main__":
    main()
