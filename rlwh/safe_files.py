"""Crash-safe file writing, shared by every writer (the warehouse, the dataset, exports,
the parse workers): durable renames, containment of what a writer publishes, the sweep of
folders left by killed processes, and the pause point crash tests stop a process at.

A leaf: it imports nothing of rlwh but errors, so the executors and storage both use it
without depending on each other.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from rlwh.errors import RlwhError

REMOVING = ".removing-"  # remove_folder's name for a folder it is removing


def fsync_path(folder: Path) -> None:
    """Flush a file, or a folder's entries (a rename is durable only then), to disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_file_system(path: Path) -> None:
    """Make every write so far to the file system that holds `path` durable, its files' data
    and its folders' entries: one syncfs(2) on Linux (a dataset's publish writes hundreds of
    files into new folders: one call, not an fsync per file and per folder), os.sync() elsewhere."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    if libc is None or not hasattr(libc, "syncfs"):
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"syncfs {path}: {os.strerror(error)}")
    finally:
        os.close(fd)


def pause_for_test(stage: str) -> None:
    """Crash tests set RLWH_TEST_PAUSE_AT=<stage>: the process stops itself (SIGSTOP) the first
    time it reaches that stage, so the test can kill -9 it exactly there. Does nothing otherwise."""
    if os.environ.get("RLWH_TEST_PAUSE_AT") == stage:
        del os.environ["RLWH_TEST_PAUSE_AT"]
        os.kill(os.getpid(), signal.SIGSTOP)


def remove_orphaned(parent: Path, prefix: str) -> None:
    """Remove the folders `parent/<prefix><pid>-*` whose process is gone (killed before it
    could clean up); a live process's folder, this one's included, is left alone."""
    for path in parent.glob(prefix + "*"):
        try:
            pid = int(path.name[len(prefix):].split("-", 1)[0])
        except ValueError:
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's


def remove_folder(folder: Path) -> None:
    """Remove `folder` and all it holds, renamed aside first (`<name>.removing-<pid>-...`, so
    remove_orphaned finds it after a kill): a process still writing under its path (a Ray
    task that runs on a moment after its ingest stopped) then finds nothing there, where
    it could add a file while the folder was being removed and leave it half removed."""
    aside = folder.with_name(f"{folder.name}{REMOVING}{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:
        return
    except OSError:  # cannot rename here: remove it where it is
        aside = folder
    shutil.rmtree(aside, ignore_errors=True)


def check_contained(root: Path, what: str = "export") -> None:
    """Every path under root is a plain file or folder inside it (no links, no escape);
    `what` names the writer in the error (export, dataset). The walk follows no link, so
    without a link under root every path it meets lies inside root: one lstat per path
    (resolving each path cost seconds on a dataset of 50,000 files)."""
    for folder, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                raise RlwhError(f"{what} refused: {path} would lie outside {root}")


SPILL_PREFIX = "rlwh-spill-"
_spill_lock = threading.Lock()
_spill: dict[int, Path] = {}  # by pid: a forked child makes its own


def process_spill_folder() -> Path:
    """This process's folder for DuckDB to spill into, in the system temp dir (node-local on
    a Ray node), removed when the process exits; folders of killed processes (atexit never
    ran: Ray kills its workers) are removed when the next process makes its own."""
    with _spill_lock:
        pid = os.getpid()
        if pid not in _spill:
            remove_orphaned(Path(tempfile.gettempdir()), SPILL_PREFIX)
            _spill[pid] = Path(tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{pid}-"))
            atexit.register(shutil.rmtree, _spill[pid], True)
        return _spill[pid]
