"""Write a benchmark-sized synthetic Ascend profile with rlwh.synth.

The trace is sized in MB (converted to a cpu_op count with the generator's measured
bytes per op) because that is how DESIGN.md states the benchmark: one rank with a
1 GB compact trace_view.json (1.6 M events, 27 % stacked, <= 4 k distinct stacks)
and a 1.5 M-row operator_memory.csv.

Usage: python bench/gen.py OUT_DIR [--trace-mb 1000] [--csv-rows 1500000] [--ranks 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from rlwh import synth  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--trace-mb", type=float, default=1000.0, help="trace_view.json size per rank, MB")
    parser.add_argument("--csv-rows", type=int, default=1_500_000, help="operator_memory.csv rows per rank")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--role", default="actor_update")
    parser.add_argument("--stacks", type=int, default=4000, help="distinct call stacks")
    parser.add_argument("--stacked-fraction", type=float, default=0.27)
    parser.add_argument("--format", choices=("compact", "pretty"), default="compact")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    n_ops = synth.ops_for_trace_mb(args.trace_mb, args.format, args.stacked_fraction)
    start = time.perf_counter()
    synth.write_ascend_profile(
        args.out_dir, roles=(args.role,), ranks=args.ranks, seed=args.seed, n_ops=n_ops,
        n_allocs=args.csv_rows, n_stacks=args.stacks, stacked_fraction=args.stacked_fraction,
        trace_format=args.format)
    seconds = time.perf_counter() - start
    total = 0
    for path in sorted(args.out_dir.glob("**/ASCEND_PROFILER_OUTPUT/*")):
        size = path.stat().st_size
        total += size
        print(f"{size / 1e6:10.1f} MB  {path}")
    print(f"{n_ops} cpu_ops, {args.csv_rows} rows per rank; {total / 1e6:.0f} MB in {seconds:.1f} s "
          f"({total / 1e6 / seconds:.0f} MB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
