"""`rlwh ingest --executor ray` on a real Ray cluster gives the warehouse a local ingest gives.

One cluster for the module (tests/ray_cluster.py): a head (127.0.0.1) and a worker node
(127.0.0.2), each with 1 CPU, in a network namespace of their own. The worker differs
from the head the ways real nodes do:

- it sees its own empty tmpfs over HIDDEN, so a warehouse under HIDDEN has a parts folder
  that node cannot see (its tasks' files come back through the object store), and a
  profile under HIDDEN is one that node does not hold (its tasks must run on the head);
- while a test holds `_no_rlwh_on_the_worker`, it cannot import rlwh (a sitecustomize
  drops the checkout, where the editable install points, from sys.path of every process
  started there), so an ingest must ship rlwh to it (runtime_env). Only the tests of
  shipping ask for that: it costs an ingest a second connection and a second worker per
  node (12.5 busy CPU-s against 8.5 for 12 captures on three nodes, session 23).

Every node has RLWH_TEST_RAY_HOOKS set (rlwh.executors.ray_remote._test_hook), which does nothing
until a test drops a stage file there. The ingest runs as a real `rlwh ingest` process
inside the cluster's namespace, started from a folder without rlwh in it (Ray puts the
driver's working folder on its workers' sys.path, which would hide a missing install).
The cluster stops when the module ends: idle, its daemons use ~6% of a core.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray_cluster
from warehouse_compare import differences, every_table_differences, row_count

from rlwh import synth
from rlwh.config import Config
from rlwh.ingest.runner import ingest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
# The driver: the CLI, with the Ray executor's log on stderr, and whether Ray is still
# connected once the command is done (it must not be).
DRIVER = """
import faulthandler, logging, signal, sys
faulthandler.register(signal.SIGUSR1)  # a test that times out asks where the driver hangs
logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
logging.getLogger("ray").setLevel(logging.ERROR)
from rlwh.cli import cli
try:
    cli(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
ray = sys.modules.get("ray")
print("ray connected after the command:", bool(ray and ray.is_initialized()), file=sys.stderr)
sys.exit(code)
"""
# While the file named by RLWH_TEST_HIDE_RLWH exists: drops the checkout, and any other
# checkout of rlwh (a git worktree's tests run with PYTHONPATH on a venv whose editable
# install points at the main checkout); what Ray ships (runtime_env py_modules) is the
# package alone, no pyproject.toml beside it, and stays.
HIDE_RLWH = f"""
import os, sys
def checkout(p):
    return os.path.isfile(os.path.join(p, "pyproject.toml")) and os.path.isdir(os.path.join(p, "rlwh"))
if os.path.exists(os.environ.get("RLWH_TEST_HIDE_RLWH", "")):
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != {str(REPO)!r}
                   and not checkout(p or os.curdir)]
"""


def _ray_not_installed() -> str | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install 'rlwh[ray]')"
    return None


def _ray_missing() -> str | None:
    """Why the cluster tests cannot run here (no Ray, or no network namespaces), or None."""
    return _ray_not_installed() or ray_cluster.available()


def _skip_or_fail(reason: str):
    if os.environ.get("CI"):  # CI installs the extra as root: there a missing piece is a failure
        pytest.fail(f"the Ray tests cannot run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = _ray_missing()
    if reason:
        _skip_or_fail(reason)
    root = tmp_path_factory.mktemp("ray-cluster")
    (root / "no-rlwh").mkdir()
    (root / "no-rlwh" / "sitecustomize.py").write_text(HIDE_RLWH)
    (root / "hooks").mkdir()
    hooks = {"RLWH_TEST_RAY_HOOKS": str(root / "hooks")}
    no_rlwh = {"PYTHONPATH": str(root / "no-rlwh"), "RLWH_TEST_HIDE_RLWH": str(root / "hide-rlwh")}
    nodes = [ray_cluster.Node("127.0.0.2", env={**no_rlwh, **hooks}, hide=root / "hidden")]
    running = ray_cluster.LocalCluster(root, nodes, node_env=hooks).start()
    yield running
    netns = running._netns()
    running.stop()
    assert running.processes(netns) == [], "processes of the test cluster left after stop"


@contextlib.contextmanager
def _no_rlwh_on_the_worker(cluster):
    """127.0.0.2 cannot import rlwh in the processes it starts meanwhile (a job's workers)."""
    flag = cluster.root / "hide-rlwh"
    flag.write_text("")
    try:
        yield
    finally:
        flag.unlink()


@pytest.fixture(scope="module")
def area(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ray")


@pytest.fixture(scope="module")
def demo(demo_profile) -> Path:
    """The session's demo profile (conftest; run "demo"): read it, never change it."""
    return demo_profile


@pytest.fixture(scope="module")
def many_ranks(area) -> Path:
    """2 roles x 3 ranks of small Ascend rank dirs: 6 captures, so 6 tasks or more, three
    for each of the two 1-CPU nodes (24 took seconds more per ingest and proved no more)."""
    return synth.write_ascend_profile(area / "many" / "ranks-run", ranks=3, n_ops=300, n_allocs=200, n_stacks=20)


def _local(profile: Path, db: Path) -> Path:
    """The reference: the same profile ingested by the local pool."""
    db.parent.mkdir(parents=True, exist_ok=True)
    summary = ingest(profile, Config(db_path=db, workers=1))
    assert summary.failed == 0
    return db


@pytest.fixture(scope="module")
def demo_local(demo_warehouse) -> Path:
    """The reference: the session's demo warehouse, ingested by the local pool (conftest)."""
    return demo_warehouse


@pytest.fixture(scope="module")
def many_local(area, many_ranks) -> Path:
    return _local(many_ranks, area / "local-many" / "w.duckdb")


def _driver(cluster, db: Path, profile: Path) -> list[str]:
    db.parent.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-c", DRIVER, "ingest", "--db", str(db), str(profile), "--executor", "ray",
            "--ray-address", cluster.address]


def _ray_ingest(cluster, db: Path, profile: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return cluster.run_driver(_driver(cluster, db, profile), cwd=cluster.root, extra_env=env)


def _assert_same(db: Path, reference: Path, proc: subprocess.CompletedProcess, thin: bool = False) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "ray connected after the command: False" in proc.stderr
    assert row_count(reference) > 1000
    if not thin:  # a thin file's tables are views, which differences() does not list
        assert differences(db, reference) == {}
    assert every_table_differences(db, reference) == {}  # the derived tables too, built on the nodes
    leftovers = sorted(p.name for p in db.parent.iterdir() if p.name not in (db.name, db.name + ".lock"))
    assert leftovers == [], f"left beside the warehouse: {leftovers}"


def _task_nodes(stderr: str) -> dict[str, set[str]]:
    """{transport: node ids} from the executor's per-task log lines."""
    seen: dict[str, set[str]] = {}
    for node, via in re.findall(r"ran on node (\w+), files via the (object store|shared parts folder)", stderr):
        seen.setdefault(via, set()).add(node)
    return seen


@pytest.fixture(scope="module")
def demo_on_ray(cluster, demo) -> tuple[Path, subprocess.CompletedProcess]:
    """The demo ingested into a warehouse under HIDDEN, with rlwh shipped to the worker node:
    the worker node gets rlwh through runtime_env and sends its files through the object
    store, the head writes into the shared parts folder."""
    db = cluster.root / "hidden" / "ray-demo" / "w.duckdb"
    with _no_rlwh_on_the_worker(cluster):
        return db, _ray_ingest(cluster, db, demo)


def _both_routes(proc: subprocess.CompletedProcess) -> None:
    """The worker node's tasks came back through the object store, the head's through the
    shared parts folder (the warehouse is under HIDDEN)."""
    assert re.search(r"ray node 127\.0\.0\.2 .*, object store,", proc.stderr), proc.stderr[-3000:]
    assert re.search(r"ray node 127\.0\.0\.1 .*, shared parts folder,", proc.stderr), proc.stderr[-3000:]
    via = _task_nodes(proc.stderr)
    assert via.get("object store") and via.get("shared parts folder"), via


# --------------------------------------------------------------------------- same rows


def test_demo_on_ray_equals_local_ingest(demo_on_ray, demo_local):
    db, proc = demo_on_ray
    _assert_same(db, demo_local, proc)
    _both_routes(proc)


def test_demo_in_dataset_mode_on_ray_equals_local_ingest(cluster, demo, demo_local):
    """Dataset mode: the nodes build and stage each capture (the worker node's through the
    object store), the driver publishes one generation; the thin file equals the local warehouse."""
    db = cluster.root / "hidden" / "dataset" / "thin.duckdb"
    ds = cluster.root / "hidden" / "dataset-root"
    proc = cluster.run_driver(_driver(cluster, db, demo) + ["--dataset", str(ds)], cwd=cluster.root)
    _assert_same(db, demo_local, proc, thin=True)
    assert (ds / "current" / "_manifest.json").is_file()
    _both_routes(proc)


def test_tasks_run_where_their_files_are(cluster, area):
    """The profile is under HIDDEN, so 127.0.0.2 does not hold it: every task must run on
    the head (a task sent to 127.0.0.2 would fail to read its file)."""
    profile = synth.write_ascend_profile(cluster.root / "hidden" / "node-local" / "local-run", ranks=3, n_ops=200,
                                         n_allocs=100, n_stacks=10)
    reference = _local(profile, area / "local-node-local" / "w.duckdb")
    db = area / "ray-node-local" / "w.duckdb"
    proc = _ray_ingest(cluster, db, profile)
    _assert_same(db, reference, proc)
    (blind,) = re.findall(r"ray node 127\.0\.0\.2 \(node (\w+)\).* holds 0 inputs", proc.stderr)
    assert re.search(r"ray node 127\.0\.0\.1 .* holds [1-9]\d* inputs", proc.stderr)
    ran_on = set().union(*_task_nodes(proc.stderr).values())
    assert ran_on and blind not in ran_on


# --------------------------------------------------------------------------- shipping rlwh


def test_a_node_without_rlwh_gets_it_through_runtime_env(cluster, demo_on_ray):
    plain_task = """
import logging, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(log_to_driver=False, logging_level=logging.ERROR)
def imports():
    try:
        import rlwh.ingest.parse
        return "imported " + rlwh.ingest.parse.__file__
    except ImportError as exc:
        return f"ImportError: {exc}"
node = next(n["NodeID"] for n in ray.nodes() if n["NodeManagerAddress"] == "127.0.0.2" and n["Alive"])
strategy = NodeAffinitySchedulingStrategy(node, soft=False)
print(ray.get(ray.remote(imports).options(scheduling_strategy=strategy).remote()))
"""
    with _no_rlwh_on_the_worker(cluster):
        proc = cluster.run_driver([sys.executable, "-c", plain_task], cwd=cluster.root)
    # The node's rlwh is a bare namespace package (no code): the first subpackage is missing.
    assert "ImportError: No module named 'rlwh.ingest'" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    _, ingest_proc = demo_on_ray
    assert re.search(r"ray node 127\.0\.0\.2 .*rlwh shipped \(runtime_env\)", ingest_proc.stderr)
    assert re.search(r"ray node 127\.0\.0\.1 .*rlwh installed", ingest_proc.stderr)


def test_a_node_with_other_reader_code_is_refused(cluster, area, demo):
    """The driver runs a copy of rlwh with one changed reader file; the nodes run the checkout."""
    alt = area / "alt-rlwh"
    shutil.copytree(REPO / "rlwh", alt / "rlwh", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("sql", "migrations", "ingest", "reports"):
        shutil.copytree(REPO / name, alt / name)
    with open(alt / "rlwh" / "parse.py", "a") as f:
        f.write("\n# a different reader\n")
    db = area / "mismatch" / "w.duckdb"
    proc = _ray_ingest(cluster, db, demo, env={"PYTHONPATH": str(alt)})
    assert proc.returncode == 1, proc.stderr[-3000:]
    message = proc.stderr
    assert re.search(r"Ray node 127\.0\.0\.[12] \(node \w+\) runs rlwh 0\.\d+\.\d+ \(code (\w+), at "
                     + re.escape(str(REPO / "rlwh")) + r"\), this ingest runs rlwh 0\.\d+\.\d+ \(code (\w+), at "
                     + re.escape(str(alt / "rlwh")), message), message[-3000:]
    codes = re.findall(r"\(code (\w+),", message)
    assert len(set(codes)) == 2
    assert "Traceback" not in message


# --------------------------------------------------------------------------- retries


def _state(pid: int) -> str | None:
    """The process's state letter (T stopped, Z exited), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _stopped(pid: int) -> bool:
    return _state(pid) == "T"


def _gone(pid: int) -> bool:
    return _state(pid) in (None, "Z")


@contextlib.contextmanager
def _driver_with_a_stopped_task(cluster, db: Path, profile: Path):
    """Start a Ray ingest whose first task to finish parsing stops itself before returning
    (its files written); yield (the driver process, that worker's pid). Afterwards no
    driver, hook or stopped worker is left, whatever the test did."""
    hooks = cluster.root / "hooks"
    (hooks / "task_parsed").write_text("")
    proc = subprocess.Popen(cluster.driver_command(_driver(cluster, db, profile)), cwd=cluster.root,
                            env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = _wait_for_stopped_task(hooks, proc, time.monotonic() + 180)
        yield proc, pid
    finally:
        if proc.poll() is None:
            proc.kill()
        for path in hooks.glob("task_parsed*"):
            path.unlink()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # only if the test failed: never leave a stopped worker


def test_a_task_killed_mid_parse_is_retried_and_lands_once(cluster, area, many_ranks, many_local):
    """The first attempt to finish parsing stops itself before returning (its files are
    written); it is killed -9 there; Ray retries it, and the rows land exactly once."""
    db = area / "killed" / "w.duckdb"
    with _driver_with_a_stopped_task(cluster, db, many_ranks) as (proc, pid):
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    assert _gone(pid)
    _assert_same(db, many_local, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))


def _wait_for_stopped_task(hooks: Path, proc: subprocess.Popen, deadline: float) -> int:
    """The pid of the Ray worker that claimed the task_parsed hook, once it has stopped."""
    while not (claimed := list(hooks.glob("task_parsed.*"))):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no task reached the hook"
        time.sleep(0.05)
    pid = int(claimed[0].suffix[1:])
    while not _stopped(pid):
        assert time.monotonic() < deadline, f"worker {pid} never stopped"
        time.sleep(0.05)
    return pid


def test_ctrl_c_cancels_the_tasks_and_leaves_no_ray_state(cluster, area, many_ranks):
    """Ctrl-C while a task hangs (stopped): the ingest ends at once, the hung worker is
    killed with the job the driver ends, the driver holds no Ray connection (and Ray did
    not abort it), and the warehouse is untouched."""
    db = area / "interrupted" / "w.duckdb"
    with _driver_with_a_stopped_task(cluster, db, many_ranks) as (proc, pid):
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            proc.kill()
            pytest.fail("the ingest did not end within 120 s of Ctrl-C:\n" + proc.communicate()[1][-6000:])
        deadline = time.monotonic() + 30
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        killed = _gone(pid)
    assert proc.returncode not in (0, None), err[-3000:]
    assert "ray connected after the command: False" in err, err[-3000:]
    assert killed, "the hung task's worker was not killed"
    assert not db.exists() or row_count(db) == 0
    assert not (db.parent / (db.name + ".parts")).exists()


# --------------------------------------------------------------------------- errors, no cluster needed


def _cli(args: list[str], cwd: Path, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}\nimport sys\nfrom rlwh.cli import cli\ncli(sys.argv[1:])"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=120)


def test_without_ray_installed_the_message_says_how(tmp_path):
    profile = synth.write_ascend_profile(tmp_path / "p", roles=("actor",), ranks=1, n_ops=20, n_allocs=10,
                                         n_stacks=2)
    proc = _cli(["ingest", "--db", str(tmp_path / "w.duckdb"), str(profile), "--executor", "ray"], tmp_path,
                prelude="import sys; sys.modules['ray'] = None  # import ray raises ImportError")
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'rlwh[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_cluster_at_the_address_is_a_clear_error(tmp_path):
    """Needs Ray importable (not the cluster): without it the install message comes first."""
    if _ray_not_installed():
        _skip_or_fail(_ray_not_installed())
    profile = synth.write_ascend_profile(tmp_path / "p", roles=("actor",), ranks=1, n_ops=20, n_allocs=10,
                                         n_stacks=2)
    started = time.monotonic()
    proc = _cli(["ingest", "--db", str(tmp_path / "w.duckdb"), str(profile), "--ray-address", "127.0.0.9:9"],
                tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "no Ray cluster answers at 127.0.0.9:9" in proc.stderr
    assert "ray start --head" in proc.stderr and "rlwh never starts a cluster" in proc.stderr
    assert time.monotonic() - started < 60
    local = _cli(["ingest", "--db", str(tmp_path / "w.duckdb"), str(profile), "--ray-address", "local"], tmp_path)
    assert local.returncode == 1 and "does not start a Ray cluster" in local.stderr
