"""`rlwh ingest --executor ray`: parse tasks run on an existing Ray cluster.

Same contract as rlwh.executors.run.local_pool: (task, result) pairs as tasks finish, largest
task submitted first, each attempt in an empty folder of its own, and every path string in
a result that lies under that folder is a file the task wrote there. The loader (DuckDB,
one writer) stays in this process; only parsing is spread.

Choices, and why:

- rlwh never starts a cluster (a forgotten local head would hold memory and ports after
  the ingest ends); it connects to `[ingest] ray_address`, else RAY_ADDRESS, else "auto",
  and says how to start one when nothing answers. The connection is bounded in time (a
  TCP check first, then ray.init in a bounded wait) and quiet (no worker logs here).
- Same code everywhere. Before any task, one probe per alive node (hard node affinity)
  reports that node's rlwh version and a fingerprint of its reader code (rlwh/**/*.py and
  the sql/, migrations/, ingest/ assets). A node with a *different* rlwh is an error naming
  it and both versions: its rows would not match a local ingest, and which code a cluster
  runs is its operator's choice, not something to override quietly. A node *without*
  rlwh gets this one through runtime_env (py_modules: a staged copy of the package with
  its assets inside, as a wheel has them; Ray uploads a local folder only for a whole job,
  so the driver connects again with it), and a second probe proves the shipped code has
  the same fingerprint. Shipping only when needed keeps the common case (rlwh installed on
  the cluster image) free of the upload and of the extra worker start it costs per node.
- Retries never land rows twice: an attempt writes into its own folder; the driver
  keeps the folder the one returned result names and removes the task's others. Ray
  retries a task whose worker died (max_retries); an exception inside the task is not
  retried (a reader error is already a result, so an exception is a bug to report).
- Files travel the cheapest way per node: a node that reads the driver's marker file in
  the parts folder (a shared filesystem) writes parts straight there; any other node
  sends the files' bytes back in its result, and the driver writes them under parts/.
- Tasks go where their files are: the probe also reports which task inputs each node
  holds (same path, same size); a task whose files only some nodes hold prefers one of
  them (soft node affinity, spread round-robin); files everywhere (shared storage), or
  nowhere, leave placement to Ray.
- On any exception, Ctrl-C included, the connection rlwh made is shut down, which ends the
  job: Ray kills the workers of its running tasks (a stopped one too) and drops its queued
  ones, so the process holds no Ray state after the ingest. Tasks are not cancelled first:
  a force cancel racing a task's reply made Ray 2.60 abort the driver ("Tried to complete
  task that was not pending"), 2 Ctrl-C tests in 8. On a connection the process already
  had (not rlwh's to end), the outstanding tasks are cancelled (force) instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
import socket
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

from rlwh.assets import ASSET_DIRS, asset_dir
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.executors import ray_remote
from rlwh.executors.task import Task

CONNECT_SECONDS = 60  # ray.init against a GCS that accepts TCP but never answers
PROBE_SECONDS = 300  # the probes start a worker on every node (and unpack rlwh where shipped)
MAX_RETRIES = 3  # attempts after a worker or node died mid-task
log = logging.getLogger(__name__)
INSTALL_HINT = "pip install 'rlwh[ray]'"
START_HINT = "start one with `ray start --head` (rlwh never starts a cluster itself)"


def ray_pool(tasks: list[Task], parts: Path, config: Config) -> Iterator[tuple[Task, Any]]:
    """Yield (task, result) as tasks finish on the Ray cluster `config` names."""
    ray = import_ray()
    if not tasks:
        return
    address = cluster_address(config)
    owned = connect(ray, address)
    pending: dict = {}
    try:
        mine = _mine()  # once: what every node must run, even if the files change meanwhile
        nodes = probe_nodes(ray, parts, tasks)
        check_versions(nodes, mine, allow_missing=True)
        missing = {n["node_id"] for n in nodes if n["rlwh"] is None}
        with staged_rlwh(parts, mine) if missing else contextlib.nullcontext() as package:
            if missing:
                assert package is not None  # staged_rlwh's folder
                owned = reconnect_shipping(ray, address, package, owned, nodes)
                nodes = probe_nodes(ray, parts, tasks)
                check_versions(nodes, mine)
            _log_nodes(nodes, missing)
            pending = submit(ray, tasks, parts, nodes)
            while pending:
                # A bounded wait, so Ctrl-C is seen within a second whatever Ray does with signals.
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                if not ready:
                    continue
                task = pending.pop(ready[0])
                yield task, accept(task, parts, fetch(ray, ready[0], task))
    except BaseException:
        if not owned:  # a connection this call made is shut down below, which ends the job
            cancel(ray, pending)
        raise
    finally:
        if owned:
            ray.shutdown()


def import_ray():
    """The ray module, or an error that says how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise RlwhError(f"--executor ray needs Ray, which is not installed here: {INSTALL_HINT}") from exc
    return ray


def cluster_address(config: Config) -> str:
    """[ingest] ray_address / --ray-address, else RAY_ADDRESS, else "auto" (the cluster
    `ray start` left its address for on this machine). Never "local": that starts one."""
    address = config.ray_address or os.environ.get("RAY_ADDRESS") or "auto"
    if address in ("local", "None"):
        raise RlwhError(f"--ray-address {address}: rlwh does not start a Ray cluster; {START_HINT} "
                        "and pass its address")
    return address


def _host_port(address: str) -> tuple[str, int] | None:
    """host and port of a GCS address ("h:p" or "ray://h:p"); None for "auto" and the like."""
    bare = address.split("://", 1)[-1]
    host, _, port = bare.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


def _resolve(ray, address: str) -> str:
    """"auto" as Ray resolves it (the address file `ray start` wrote), or a clear error."""
    if address != "auto":
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address("auto")
    except Exception:  # a Ray without this helper: leave "auto" to ray.init
        return address
    if not found:
        raise RlwhError(f"no Ray cluster found on this machine (--ray-address auto); {START_HINT}, "
                        "or name a cluster with --ray-address / [ingest] ray_address / RAY_ADDRESS")
    return found


def _check_answers(address: str) -> None:
    """A TCP connect to the GCS: ray.init itself retries for minutes when nobody listens."""
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=5).close()
    except OSError as exc:
        raise RlwhError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); {START_HINT}, "
                        "or name a running one with --ray-address / [ingest] ray_address / RAY_ADDRESS") from exc


def connect(ray, address: str, runtime_env: dict | None = None) -> bool:
    """Connect to the cluster, quietly and within CONNECT_SECONDS. True when this call made
    the connection (and so must shut it down); False when the process already had one."""
    if ray.is_initialized():
        return False
    address = _resolve(ray, address)
    _check_answers(address)
    outcome: dict = {}

    def init() -> None:
        try:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level=logging.ERROR)
            outcome["ok"] = True
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc

    thread = threading.Thread(target=init, name="rlwh-ray-init", daemon=True)
    thread.start()
    thread.join(CONNECT_SECONDS)
    if "error" in outcome:
        raise RlwhError(f"cannot connect to the Ray cluster at {address}: {outcome['error']}") from outcome["error"]
    if not outcome:
        raise RlwhError(f"the Ray cluster at {address} accepted a connection but did not answer within "
                        f"{CONNECT_SECONDS} s (is it a Ray GCS port? is its token, RAY_AUTH_TOKEN, set here?)")
    return True


def _remote(ray, function):
    """A Ray remote function over rlwh.executors.ray_remote code, pickled by value (see that module)."""
    ray.cloudpickle.register_pickle_by_value(ray_remote)
    return ray.remote(function)


def alive_nodes(ray) -> list[dict]:
    return [n for n in ray.nodes() if n.get("Alive")]


def _node_name(node: dict) -> str:
    return f"{node.get('NodeManagerAddress', '?')} (node {node['NodeID'][:12]})"


def probe_nodes(ray, parts: Path, tasks: list[Task]) -> list[dict]:
    """Run ray_remote.describe_node once on every alive node (hard affinity); each answer
    gains the node's `name` and `cpus`. Raises when a node cannot run it in time."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = secrets.token_hex(16)
    marker = parts / f".rlwh-ray-probe-{uuid.uuid4().hex}"
    marker.write_text(token)
    inputs = [(path, _size(path)) for task in tasks for path in task.paths]
    nodes = alive_nodes(ray)
    try:
        probe = _remote(ray, ray_remote.describe_node)
        refs = [probe.options(num_cpus=0, max_retries=1,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
                              ).remote(str(marker), token, inputs) for n in nodes]
        ready, late = ray.wait(refs, num_returns=len(refs), timeout=PROBE_SECONDS)
        if late:
            names = ", ".join(_node_name(nodes[refs.index(r)]) for r in late)
            cancel(ray, dict.fromkeys(late))
            raise RlwhError(f"Ray node(s) {names} did not run rlwh's probe within {PROBE_SECONDS} s")
        answers = ray.get(refs)
    finally:
        marker.unlink(missing_ok=True)
    for node, answer in zip(nodes, answers):
        answer.update(name=_node_name(node), cpus=node.get("Resources", {}).get("CPU", 0))
    return answers


def _size(path: str) -> int:
    """The file's size here, or -1 (no node then matches it) when it is gone."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _mine() -> dict:
    found = ray_remote.installed_rlwh()
    assert found is not None  # this very module is rlwh
    return found


def _describe(code: dict) -> str:
    return f"rlwh {code['version']} (code {code['fingerprint'][:12]}, at {code['at']})"


def check_versions(nodes: list[dict], mine: dict, allow_missing: bool = False) -> None:
    """Every node runs the driver's rlwh, `mine` (or, with allow_missing, none at all)."""
    for node in nodes:
        theirs = node["rlwh"]
        if theirs is None and allow_missing:
            continue
        if theirs is None:
            raise RlwhError(f"Ray node {node['name']} still cannot import rlwh after it was shipped to it "
                            "(runtime_env py_modules)")
        if (theirs["version"], theirs["fingerprint"]) != (mine["version"], mine["fingerprint"]):
            raise RlwhError(f"Ray node {node['name']} runs {_describe(theirs)}, this ingest runs {_describe(mine)}: "
                            "its rows would differ from a local ingest; install the same rlwh on every node "
                            "(or remove it there: rlwh then ships this one)")


@contextlib.contextmanager
def staged_rlwh(parts: Path, mine: dict):
    """A copy of this rlwh to ship: the package with rlwh/_assets inside (a wheel's layout,
    so rlwh.assets finds the SQL on the node), beside the parts until the ingest ends.
    It must be the code `mine` describes: a checkout edited since the ingest began is not."""
    stage = parts / f".rlwh-ship-{uuid.uuid4().hex}"
    try:
        package = stage / "rlwh"
        shutil.copytree(Path(ray_remote.__file__).parents[1], package,
                        ignore=shutil.ignore_patterns("__pycache__", "_assets"))
        for name in ASSET_DIRS:
            shutil.copytree(asset_dir(name), package / "_assets" / name)
        assets = {name: package / "_assets" / name for name in ray_remote.FINGERPRINTED_ASSETS}
        if ray_remote.code_fingerprint(package, assets) != mine["fingerprint"]:
            raise RlwhError(f"rlwh's files at {mine['at']} changed while this ingest started; run it again")
        yield package
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def reconnect_shipping(ray, address: str, package: Path, owned: bool, nodes: list[dict]) -> bool:
    """Connect again with `package` in the job's runtime_env (py_modules): Ray uploads a
    local folder only for a whole job, at ray.init, not for single tasks."""
    if not owned:
        names = ", ".join(n["name"] for n in nodes if n["rlwh"] is None)
        raise RlwhError(f"Ray node(s) {names} have no rlwh, and this process was already connected to Ray, "
                        "so rlwh cannot ship itself there: install rlwh on every node")
    ray.shutdown()
    return connect(ray, address, runtime_env={"py_modules": [str(package)]})


def _log_nodes(nodes: list[dict], shipped: set[str]) -> None:
    for n in nodes:
        code = "rlwh shipped (runtime_env)" if n["node_id"] in shipped else "rlwh installed"
        transport = "shared parts folder" if n["sees_parts"] else "object store"
        log.info("ray node %s: %s cpus, %s, %s, holds %d inputs", n["name"], n["cpus"], code, transport, len(n["has"]))


def placements(tasks: list[Task], nodes: list[dict]) -> dict[str, str | None]:
    """task name -> the node id it should prefer, or None for Ray's own choice.

    A task prefers the nodes holding all its inputs when only some nodes do, spread
    round-robin among them; when every node that can run tasks holds them (shared
    storage), or none does, placement is left to Ray.
    """
    workers = [n for n in nodes if n["cpus"] > 0]
    holding = {n["node_id"]: set(n["has"]) for n in workers}
    chosen: dict[str, str | None] = {}
    turn = index = 0
    for task in tasks:
        mine = range(index, index + len(task.paths))
        index += len(task.paths)
        holders = [node_id for node_id, has in holding.items() if all(i in has for i in mine)]
        if not task.paths or not holders or len(holders) == len(workers):
            chosen[task.name] = None
            continue
        chosen[task.name] = holders[turn % len(holders)]
        turn += 1
    return chosen


def submit(ray, tasks: list[Task], parts: Path, nodes: list[dict]) -> dict:
    """Submit every task, largest first; return {object ref: task}."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    shared = frozenset(n["node_id"] for n in nodes if n["sees_parts"])
    prefer = placements(tasks, nodes)
    run = _remote(ray, ray_remote.run_attempt)
    pending = {}
    for task in sorted(tasks, key=lambda t: -t.size):
        node = prefer[task.name]
        strategy = NodeAffinitySchedulingStrategy(node, soft=True) if node else "DEFAULT"
        attempt = run.options(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False,
                              scheduling_strategy=strategy, name=f"rlwh:{task.name}")
        pending[attempt.remote(task.function, task.args, str(parts), task.name, shared)] = task
    return pending


def fetch(ray, ref, task: Task) -> dict:
    """The attempt's answer; a task Ray gave up on (its workers kept dying) is an RlwhError."""
    from ray.exceptions import RayTaskError, TaskCancelledError

    try:
        return ray.get(ref)
    except (RayTaskError, TaskCancelledError):
        raise  # the task's own exception (a bug), or our cancel: as local_pool hands it on
    except ray.exceptions.RayError as exc:
        raise RlwhError(f"Ray could not run task {task.name} ({', '.join(task.paths)}) "
                        f"after {MAX_RETRIES} retries: {exc}") from exc


def _moved(value: Any, old: str, new: str) -> Any:
    """`value` with every path string under `old` rewritten to lie under `new`."""
    if isinstance(value, str) and (value == old or value.startswith(old + os.sep)):
        return new + value[len(old):]
    if isinstance(value, dict):
        return {k: _moved(v, old, new) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a BuiltCapture
        return dataclasses.replace(value, **{f.name: _moved(getattr(value, f.name), old, new)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, old, new) for v in value)
    return value


def accept(task: Task, parts: Path, answer: dict) -> Any:
    """The task's result with its files under parts/<task>/, other attempts' folders removed."""
    home = parts / task.name
    log.debug("task %s ran on node %s, files via %s", task.name, answer["node"][:12],
              "the object store" if "files" in answer else "the shared parts folder")
    if "files" in answer:  # came back through the object store: land them here
        keep = home / uuid.uuid4().hex
        for rel, data in answer["files"].items():
            (keep / rel).parent.mkdir(parents=True, exist_ok=True)
            (keep / rel).write_bytes(data)
        result = _moved(answer["result"], answer["dir"], str(keep))
    else:
        keep, result = Path(answer["dir"]), answer["result"]
    if home.is_dir():
        for stale in home.iterdir():
            if stale != keep:
                shutil.rmtree(stale, ignore_errors=True)
    return result


def cancel(ray, pending) -> None:
    """Stop every task still queued or running (best effort: the cluster may be gone). A
    cancel is asynchronous: a task it has not reached yet may still start, and finds no
    parts/ to write into (rlwh.executors.ray_remote.run_attempt). Nothing waits for the
    tasks here: a driver that stayed connected for their replies was aborted by Ray 2.60
    ("Tried to complete task that was not pending", a race of a cancel with a task's reply;
    which is why ray_pool, on a connection of its own, ends the job instead)."""
    for ref in list(pending):
        try:
            ray.cancel(ref, force=True)
        except Exception:  # already finished, or the connection is gone
            pass
