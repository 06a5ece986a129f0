"""Ctrl-C, wherever it lands, is reported as an interrupt: one line, exit 130.

Python raises KeyboardInterrupt on SIGINT, but inside a DuckDB query DuckDB turns it into
an error of its own ("Query interrupted"), and a reader's catch-all would record that as
a bad file and go on. The CLI arms this handler, which notes that SIGINT came; code that
turns errors into results asks `reraise_if_seen()` first, and the CLI reports any error
raised after SIGINT as the interrupt it is. Parse workers ignore SIGINT (the parent decides).
"""

from __future__ import annotations

import signal
import threading

EXIT_STATUS = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C

_seen = False


def _handler(signum, frame) -> None:
    global _seen
    _seen = True
    raise KeyboardInterrupt


def arm() -> None:
    """Catch SIGINT from now on (in the main thread; elsewhere nothing changes)."""
    global _seen
    _seen = False
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)


def seen() -> bool:
    return _seen


def reraise_if_seen() -> None:
    """Raise KeyboardInterrupt when SIGINT came since `arm()`: an error that followed it is
    the interrupt, not a fact about the file being read."""
    if _seen:
        raise KeyboardInterrupt
