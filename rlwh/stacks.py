"""Which frames of a call stack are native or library code, so views can name Python lines.

A stack is its frames innermost first, every frame kept. Two rules pick the frame that
stands for it:
- a native frame never does: one that names a file and a line ("file(line): name") whose
  file is no Python file. PyTorch's memory snapshots on Linux start every stack with C++
  frames ("??(0): torch::unwind::unwind()", "CUDACachingAllocator.cpp(0): c10::...",
  "(0): c10::..."). Frames without a file ("<built-in method add ...>", Kineto's
  python_function names) are the Python profiler's own and are kept. `top_frame` is the
  innermost frame that is not native;
- library code never names the user's line: a list of regular expressions (warehouse.toml
  [stacks] library_frames) plus, by default, the Python standard library, whose modules
  Kineto names by their relative path ("multiprocessing/spawn.py(135): _main") and Ascend
  by their absolute one ("/usr/lib/python3.9/threading.py(973): _bootstrap"). `user_frame`
  is the innermost frame that is neither native nor library code. Frames are compared with
  either separator: as written, and with every `\\` turned into `/` (Windows paths like
  "D:\\proj\\.venv\\Lib\\site-packages\\torch\\functional.py(373): einsum"), so patterns
  written with `/` match both.

rlwh joins the library patterns into one regex that it stores in the warehouse
(internal.settings 'library_frames'); the SQL below applies both rules where stacks are
stored (call_stacks.top_frame, internal.stack_user_frames). DuckDB's RE2 and Python's re agree on
the syntax used here.
"""

from __future__ import annotations

import re
import sys

# Frames from these are library code unless warehouse.toml says otherwise.
DEFAULT_LIBRARY_FRAMES = (
    r"site-packages/",
    r"dist-packages/",
    r"(^|/)torch/",
    r"(^|/)torch_npu/",
    r"(^|/)transformers/",
    r"(^|/)python3\.\d+/",  # an absolute path into the standard library
    r"^[A-Za-z]:/(.*/)?Lib/",  # Windows: the standard library and site-packages live under ...\Lib\
    r"^<",  # <built-in method ...>, <frozen importlib._bootstrap>, <string>(1): <module>
    r"^nn\.Module: ",  # Kineto's module events ("nn.Module: Linear_0") are no line of code
)

# A frame that names a file and a line: "file(line): name" (the file may be empty).
LINE_FRAME = r"^.*\(-?[0-9]+\): "
# ... whose file is Python code: a .py/.pyw/.pyx file, or <string>, <frozen ...> and the like.
PYTHON_LINE_FRAME = r"^(.*\.[Pp][Yy][WwXx]?|<[^>]*>)\(-?[0-9]+\): "


def is_native(frame: str) -> bool:
    """True for a frame that names a file and a line, the file no Python code (C/C++, ??, none)."""
    return re.search(LINE_FRAME, frame) is not None and re.search(PYTHON_LINE_FRAME, frame) is None


def top_frame(stack: str) -> str | None:
    """The innermost frame of `stack` (frames joined by newlines) that is not native."""
    return next((f for f in stack.split("\n") if not is_native(f)), None)


def _stdlib_pattern() -> str:
    """The standard library's top-level modules as Kineto writes their frames."""
    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n != "this")
    return r"^(" + "|".join(re.escape(n) for n in names) + r")(/|\.py\()"


def library_pattern(frames: tuple[str, ...] = DEFAULT_LIBRARY_FRAMES, stdlib: bool = True) -> str:
    """One regular expression that matches every library frame."""
    parts = [f"({p})" for p in frames]
    if stdlib:
        parts.append(f"({_stdlib_pattern()})")
    return "|".join(parts) if parts else "$^"


def is_library(frame: str, pattern: str) -> bool:
    """True when the pattern calls `frame` library code, read with either path separator."""
    rule = re.compile(pattern)
    return rule.search(frame) is not None or rule.search(frame.replace("\\", "/")) is not None


def user_frame(stack: str, pattern: str) -> str | None:
    """The innermost frame of `stack` (frames joined by newlines, innermost first) that is
    neither native nor, by the pattern, library code; None when there is none."""
    return next((f for f in stack.split("\n") if not is_native(f) and not is_library(f, pattern)), None)


def native_sql(frame: str) -> str:
    """SQL true when the frame expression `frame` is native (is_native)."""
    return (f"(regexp_matches({frame}, '{LINE_FRAME}') "
            f"and not regexp_matches({frame}, '{PYTHON_LINE_FRAME}'))")


def top_frame_sql(stack: str) -> str:
    """SQL for top_frame() of the stack expression `stack`. The innermost frame is the answer
    unless it is native, so it is tried first: the lambda over every frame only runs for
    stacks that start native (snapshots' C++ frames), 4x faster on Ascend's Python stacks."""
    first = f"split_part({stack}, chr(10), 1)"
    every = f"list_filter(string_split({stack}, chr(10)), lambda f: not {native_sql('f')})[1]"
    return f"coalesce(if({native_sql(first)}, null, {first}), {every})"


def user_frame_sql(stack: str, rule: str) -> str:
    """SQL for user_frame() of the stack expression `stack`, the library regex bound as `rule`
    (a parameter, so DuckDB compiles it once)."""
    return (f"list_filter(string_split({stack}, chr(10)), lambda f: not {native_sql('f')} "
            f"and not regexp_matches(f, {rule}) and not regexp_matches(replace(f, '\\', '/'), {rule}))[1]")


# How to record call stacks, by the kind of the trace that has none: `sources.message`,
# `rlwh summary` and the report say it of a capture whose ops carry no stack.
RECORD_STACKS = {
    "torch_trace": "torch.profiler.profile(with_stack=True)",
    "ascend_trace": "torch_npu.profiler.profile(with_stack=True)",
    "ascend_db": "torch_npu.profiler.profile(with_stack=True)",
}
NO_STACKS = ("no call stacks: the trace was recorded without them, so user_frame and call_stack_top are NULL "
             "for its ops and the memory they allocated; record with {how}")


def record_stacks_params() -> dict[str, str]:
    """The parameters of rlwh.report.queries.NO_STACK_CAPTURES: how to record stacks."""
    return {"torch_how": RECORD_STACKS["torch_trace"], "npu_how": RECORD_STACKS["ascend_trace"]}


def no_stacks_note(kind: str, ops: int) -> str | None:
    """What a trace file of `kind` whose `ops` cpu_ops carry no call stack says of itself;
    None for a kind that records no stacks, or a file without ops."""
    how = RECORD_STACKS.get(kind)
    if how is None or ops == 0:
        return None
    return f"{NO_STACKS.format(how=how)} ({ops:,} ops, none with a stack)"
