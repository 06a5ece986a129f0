"""Ctrl-C, wherever it lands, is reported as an interrupt: one line, exit 130.

Python raises KeyboardInterrupt on SIGINT, but inside a DuckDB query DuckDB turns it into
an error of its own ("Query interrupted"), and a reader's catch-all would record that as
a bad file and go on. The CLI arms this handler, which notes that SIGINT came; code that
turns errors into results asks `reraise_if_seen()` first, and the CLI reports any error
raised after SIGINT as the interrupt it is. Parse workers ignore SIGINT (the parent decides).

Before the CLI exists (the command's imports: click, duckdb, pyarrow) the entry point
`defer()`s: SIGINT is only noted then, and `arm()` raises it once the CLI can report it.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable

EXIT_STATUS = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C

_seen = False


def _handler(signum, frame) -> None:
    global _seen
    _seen = True
    raise KeyboardInterrupt


_deferred = False


def _note(signum, frame) -> None:
    global _deferred
    _deferred = True


def defer() -> None:
    """Only note SIGINT until `arm()` (the command's start-up, where nothing could report it)."""
    global _deferred
    _deferred = False
    signal.signal(signal.SIGINT, _note)


def arm() -> None:
    """Catch SIGINT from now on (in the main thread; elsewhere nothing changes); one that
    came while deferred is raised now."""
    global _seen, _deferred
    _seen = False
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)
    if _deferred:
        _deferred = False
        _seen = True
        raise KeyboardInterrupt


def seen() -> bool:
    return _seen


def forget_unhandled() -> None:
    """Call once an interrupt is reported: without it `python -m rlwh` can still end killed by
    SIGINT (status -2 to its parent, not 130). CPython marks a KeyboardInterrupt that ends code
    run from a string (`eval`, as namedtuple does while a module imports) as unhandled even
    when it is caught, and for `-m` ends the process by SIGINT at exit; the next string eval
    clears that mark (CPython 3.10-3.13 alike)."""
    exec("None", {})


def reraise_if_seen() -> None:
    """Raise KeyboardInterrupt when SIGINT came since `arm()`: an error that followed it is
    the interrupt, not a fact about the file being read."""
    if _seen:
        raise KeyboardInterrupt


class StatementThread(threading.Thread):
    """A thread running DuckDB statements on a cursor beside the main thread's, which a
    Ctrl-C in the main thread stops (`stop`) before the command exits.

    Its end is an Event it sets, never Thread.join(timeout) or is_alive(): in CPython 3.11 a
    KeyboardInterrupt landing in a join with a timeout marks a running thread as ended
    (threading's bpo-45274 handling releases the lock the running thread holds), so the
    command went on to close the cursor under the statement (a segfault) or to exit under it
    (DuckDB then aborts the process: exit -6, not 130).
    """

    def __init__(self, cursor, work: Callable[[Any], None], name: str):
        super().__init__(name=name, daemon=True)
        self.cursor = cursor
        self._work = work
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            self._work(self.cursor)
        finally:
            self.ended.set()

    def finish(self) -> None:
        """Wait for it to end (at once when it never started); a Ctrl-C meanwhile stops it,
        then is raised."""
        if self.ident is None:
            return
        try:
            self.ended.wait()
        except KeyboardInterrupt:
            self.stop()
            raise

    def stop(self) -> None:
        """Interrupt its statement until the thread ends (an interrupt that lands between two
        of its statements is lost). A second Ctrl-C meanwhile changes nothing: the command
        stops once the statement has (leaving it running would abort the exit)."""
        if self.ident is None:  # never started
            return
        while not self.ended.is_set():
            try:
                self.cursor.interrupt()
                self.ended.wait(0.05)
            except KeyboardInterrupt:
                continue

    def close(self) -> None:
        """Close its cursor once it has ended (never under a statement)."""
        if self.ident is None or self.ended.is_set():
            self.cursor.close()
