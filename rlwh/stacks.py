"""Which frames of a call stack are library code, so views can name the user's own line.

The rule is a list of regular expressions (warehouse.toml [stacks] library_frames) plus,
by default, the Python standard library, whose modules Kineto names by their relative path
("multiprocessing/spawn.py(135): _main") and Ascend by their absolute one
("/usr/lib/python3.9/threading.py(973): _bootstrap"). rlwh joins them into one regex that
it stores in the warehouse (internal.settings 'library_frames'), where the internal.stack_frames view
reads it: DuckDB's RE2 and Python's re agree on the syntax used here.
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
    r"^<",  # <built-in method ...>, <frozen importlib._bootstrap>, <string>(1): <module>
    r"^nn\.Module: ",  # Kineto's module events ("nn.Module: Linear_0") are no line of code
)


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


def user_frame(stack: str, pattern: str) -> str | None:
    """The innermost frame of `stack` (frames joined by newlines, innermost first) that
    the pattern does not call library code; None when all are."""
    rule = re.compile(pattern)
    return next((f for f in stack.split("\n") if not rule.search(f)), None)
