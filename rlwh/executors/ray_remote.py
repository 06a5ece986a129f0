"""The code rlwh's Ray executor runs on the cluster's nodes (rlwh.executors.ray_pool drives it).

Everything here uses the standard library only and is pickled by value, so it runs on
a node where rlwh is not installed: that is how such a node says so (the probe), and
how a task finds out where to put its files. The driver uses the same `code_fingerprint`
on its own rlwh, so "same code" means the same bytes on both sides.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

# What decides how a file is read: the package's Python code and these asset folders.
FINGERPRINTED_ASSETS = ("sql", "migrations", "ingest")


def code_fingerprint(package: Path, assets: dict[str, Path]) -> str:
    """sha256 over rlwh/**/*.py and the asset folders, by relative path and bytes.

    Paths are relative to their own folder, so a checkout (assets beside the package)
    and a wheel or a shipped copy (assets in rlwh/_assets) of the same code agree.
    """
    digest = hashlib.sha256()
    files = [(f"rlwh/{p.relative_to(package)}", p) for p in package.rglob("*.py")
             if "__pycache__" not in p.parts and "_assets" not in p.relative_to(package).parts]
    for name, folder in assets.items():
        files += [(f"{name}/{p.relative_to(folder)}", p) for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts]
    for rel, path in sorted(files):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def installed_rlwh() -> dict | None:
    """This process's rlwh: version and code fingerprint, or None where it cannot be imported.

    A bare namespace package (site-packages/rlwh holding only _assets, as an editable
    install leaves) counts as missing: it has no code.
    """
    try:
        import rlwh
        from rlwh.assets import asset_dir
    except ImportError:
        return None
    if not getattr(rlwh, "__file__", None):
        return None
    package = Path(rlwh.__file__).resolve().parent
    assets = {name: asset_dir(name) for name in FINGERPRINTED_ASSETS}
    return {"version": rlwh.__version__, "fingerprint": code_fingerprint(package, assets), "at": str(package)}


def describe_node(marker: str, token: str, files: list[tuple[str, int]]) -> dict:
    """What the driver needs to know about the node this runs on.

    marker/token: a file the driver wrote into the parts folder; reading the same token
    here means this node sees the driver's parts folder (a shared filesystem).
    files: (path, size) of every task's input; `has` lists the indexes present here with
    that size, so tasks can be sent where their files are.
    """
    import ray

    try:
        sees_parts = Path(marker).read_text() == token
    except OSError:
        sees_parts = False
    has = []
    for i, (path, size) in enumerate(files):
        try:
            if os.stat(path).st_size == size:
                has.append(i)
        except OSError:
            pass
    return {"node_id": ray.get_runtime_context().get_node_id(), "rlwh": installed_rlwh(),
            "sees_parts": sees_parts, "has": has, "pid": os.getpid()}


def _test_hook(stage: str) -> None:
    """Tests start nodes with RLWH_TEST_RAY_HOOKS=<dir>; a file `<dir>/<stage>` makes the
    first attempt that reaches `stage` claim it (rename, so only one does), leave its pid in
    the new name and stop itself (SIGSTOP) for the test to kill -9. Does nothing otherwise."""
    hooks = os.environ.get("RLWH_TEST_RAY_HOOKS")
    if not hooks:
        return
    try:
        os.rename(os.path.join(hooks, stage), os.path.join(hooks, f"{stage}.{os.getpid()}"))
    except OSError:
        return
    os.kill(os.getpid(), signal.SIGSTOP)


def _files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run_attempt(function, args: tuple, parts: str, name: str, shared_nodes: frozenset) -> dict:
    """One attempt of one task, in a folder no other attempt uses.

    On a node that sees the parts folder the task writes straight into
    parts/<name>/<attempt id>; elsewhere into a node-local temp folder whose files come
    back inside the result, through Ray's object store. The driver keeps the folder this
    (the one returned) attempt names and removes any other: a retried attempt's files
    are never loaded.
    """
    import ray

    node = ray.get_runtime_context().get_node_id()
    shared = node in shared_nodes
    attempt = uuid.uuid4().hex
    out = Path(parts, name, attempt) if shared else Path(tempfile.mkdtemp(prefix=f"rlwh-{name}-"))
    # parts/ itself is never made here: a task that starts after its ingest stopped (Ctrl-C,
    # an error) and removed parts/ fails instead of leaving a folder behind.
    out.parent.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    try:
        result = function(*args, str(out))
        _test_hook("task_parsed")
        if shared:
            return {"dir": str(out), "node": node, "result": result}
        return {"dir": str(out), "node": node, "result": result, "files": _files_under(out)}
    finally:
        if not shared:
            shutil.rmtree(out, ignore_errors=True)
