"""Demo and benchmark data: profiler files written byte for byte in the real formats.

The generators are for size and edge cases (the demo, make bench, crash and bad-input
tests); what a reader gets right is shown on the real files in ../shared/fixtures/real.

- ascend: Ascend rank dirs (trace_view.json, operator_memory.csv, profiler_info).
- timelines: PyTorch (Kineto) traces, Nsight NVTX exports and GMM expert-load dumps.
- pt: torch.save files (group_list.pt) written without torch.
"""

from rlwh.synth.ascend import (
    CSV_HEADER,
    RankOptions,
    ops_for_trace_mb,
    trace_bytes_per_op,
    write_ascend_profile,
    write_ascend_rank,
)

__all__ = ["CSV_HEADER", "RankOptions", "ops_for_trace_mb", "trace_bytes_per_op", "write_ascend_profile",
           "write_ascend_rank"]
