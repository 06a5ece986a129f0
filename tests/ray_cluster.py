"""A real Ray cluster for tests and bench/ray_bench.py: a head and worker nodes on loopback.

Every node is a `ray start --block` subprocess in a session of its own, all inside one
network namespace made for the cluster (`unshare -n`, root only), where loopback is the
only interface: Ray 2.60 listens on every interface of a host (and rewrites
--node-ip-address 127.0.0.1 to the host's address), so the namespace is what keeps the
cluster loopback-only, and it lets the nodes use fixed ports without clashing with
anything else on the machine. Token authentication is on, with a fresh token passed in
the environment (nothing is written to ~/.ray). Each node has 1 CPU and a bounded object
store; the temp dir is the cluster's own. A driver joins by entering the namespace
(`nsenter --net`), see `driver_command`.

`stop()` kills every process group it started and then every process left in the
namespace (a process there is this cluster's by construction), and checks none is left.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
HEAD_IP = "127.0.0.1"
GCS_PORT = 6379
OBJECT_STORE_BYTES = 128 * 1024 * 1024


@dataclass
class Node:
    ip: str
    env: dict = field(default_factory=dict)  # extra environment of this node's processes
    hide: Path | None = None  # a folder this node sees as empty (its own tmpfs over it)


def available() -> str | None:
    """None when this machine can run the cluster, else why not."""
    if not (VENV_BIN / "ray").exists():
        return "ray is not installed (pip install 'rlwh[ray]')"
    for tool in ("unshare", "nsenter", "ip"):
        if not shutil.which(tool):
            return f"{tool} is missing"
    probe = subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True, text=True)
    if probe.returncode:
        return f"cannot make network and mount namespaces (unshare -n -m: {probe.stderr.strip()}); needs root"
    return None


class LocalCluster:
    """Head on 127.0.0.1 (with `node_env`) plus `workers`, started by start(), ended by stop()."""

    def __init__(self, root: Path, workers: list[Node], node_env: dict | None = None):
        self.root = Path(root)
        self.nodes = [Node(HEAD_IP, env=dict(node_env or {}))] + list(workers)
        self.token = secrets.token_hex(32)
        self.address = f"{HEAD_IP}:{GCS_PORT}"
        # Short: Ray's unix sockets live in it, and their paths must stay under 108 bytes.
        # In the temp dir where that is short (`make test` sets TMPDIR=/dev/shm, and the
        # path guard allows the temp dir, not /tmp, then), else in /tmp.
        base = tempfile.gettempdir()
        self.temp = Path(tempfile.mkdtemp(prefix="rlwhray-", dir=base if len(base) <= 16 else "/tmp"))
        self.logs = self.root / "node-logs"
        self.netns_holder: subprocess.Popen | None = None
        self.started: list[subprocess.Popen] = []

    # ------------------------------------------------------------------ environment

    def env(self, extra: dict | None = None) -> dict:
        """The environment of the nodes and of every driver: the token, no usage stats."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, RAY_USAGE_STATS_ENABLED="0",
                   RAY_ADDRESS=self.address)
        env.update(extra or {})
        return env

    def driver_command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the cluster's network namespace (where the driver must be)."""
        return ["nsenter", f"--net=/proc/{self.netns_holder.pid}/ns/net", *argv]

    def run_driver(self, argv: list[str], cwd: Path, extra_env: dict | None = None,
                   timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.driver_command(argv), cwd=cwd, env=self.env(extra_env), capture_output=True,
                              text=True, timeout=timeout)

    # ------------------------------------------------------------------ start

    def _node_command(self, i: int, node: Node) -> list[str]:
        base = 20000 + 1000 * i  # fixed ports: the namespace has nothing else in it
        command = [str(VENV_BIN / "ray"), "start", "--block", "--node-ip-address", node.ip,
                   "--num-cpus", "1", "--object-store-memory", str(OBJECT_STORE_BYTES),
                   "--temp-dir", str(self.temp), "--disable-usage-stats",
                   "--node-manager-port", str(base), "--object-manager-port", str(base + 1),
                   "--dashboard-agent-listen-port", str(base + 2), "--dashboard-agent-grpc-port", str(base + 3),
                   "--metrics-export-port", str(base + 4), "--runtime-env-agent-port", str(base + 5),
                   "--min-worker-port", str(base + 100), "--max-worker-port", str(base + 999)]
        if i == 0:
            command += ["--head", "--port", str(GCS_PORT), "--include-dashboard", "false"]
        else:
            command += ["--address", self.address]
        if node.hide is not None:  # a private mount namespace where `hide` is an empty tmpfs
            node.hide.mkdir(parents=True, exist_ok=True)
            command = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                       'mount -t tmpfs rlwh-test-hidden "$0" && exec "$@"', str(node.hide), *command]
        return self.driver_command(command)

    def _spawn(self, command: list[str], log_name: str, extra_env: dict) -> subprocess.Popen:
        log = open(self.logs / log_name, "w")
        try:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env(extra_env), cwd=self.root, start_new_session=True)
        finally:
            log.close()

    def start(self, timeout: float = 120) -> LocalCluster:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.netns_holder = subprocess.Popen(["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep 86400"],
                                             start_new_session=True, stdin=subprocess.DEVNULL)
        self.started.append(self.netns_holder)
        deadline = time.monotonic() + timeout
        try:
            self._wait_for(lambda: self._netns() is not None and self._lo_up(), deadline, "the network namespace")
            # One at a time: nodes sharing a temp dir pick their socket names there, and two
            # starting together can pick the same one (the second raylet then aborts).
            for i, node in enumerate(self.nodes):
                self.started.append(self._spawn(self._node_command(i, node), f"node-{node.ip}.log", node.env))
                self._wait_for(lambda ip=node.ip: "Ray runtime started" in self.log(ip), deadline, f"node {node.ip}")
            self._wait_for(lambda: self.alive_nodes() == len(self.nodes), deadline,
                           f"{len(self.nodes)} nodes alive")
        except BaseException:
            self.stop()
            raise
        return self

    def log(self, ip: str) -> str:
        path = self.logs / f"node-{ip}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _lo_up(self) -> bool:
        out = subprocess.run(self.driver_command(["ip", "-o", "addr", "show", "lo"]), capture_output=True, text=True)
        return "127.0.0.1" in out.stdout

    def _wait_for(self, condition, deadline: float, what: str) -> None:
        while not condition():
            dead = [p.args for p in self.started if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {n.ip}\n{self.log(n.ip)[-1500:]}" for n in self.nodes)
                for raylet in sorted(self.temp.glob("session_latest/logs/raylet*.err")):
                    logs += f"\n--- {raylet.name}\n{raylet.read_text(errors='replace')[-1500:]}"
                raise RuntimeError(f"Ray test cluster: waiting for {what}: "
                                   f"{'a process ended: ' + str(dead[0]) if dead else 'timed out'}\n{logs}")
            time.sleep(0.3)

    def alive_nodes(self) -> int:
        """Nodes the GCS counts alive (a driver in the namespace asks; 0 if it cannot)."""
        code = ("import ray, logging; ray.init(log_to_driver=False, logging_level=logging.ERROR); "
                "print(sum(n['Alive'] for n in ray.nodes()))")
        try:
            out = self.run_driver([sys.executable, "-c", code], cwd=self.root, timeout=60)
        except subprocess.TimeoutExpired:
            return 0
        last = out.stdout.strip().splitlines()[-1:] or ["0"]
        return int(last[0]) if last[0].isdigit() else 0

    # ------------------------------------------------------------------ stop

    def _netns(self) -> str | None:
        try:
            return os.readlink(f"/proc/{self.netns_holder.pid}/ns/net")
        except OSError:
            return None

    def processes(self, netns: str) -> list[int]:
        """Every process in the cluster's network namespace."""
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/net") == netns:
                        pids.append(int(entry))
                except OSError:
                    pass
        return pids

    def stop(self) -> None:
        """Kill what start() started, by process group, then anything left in the namespace."""
        netns = self._netns() if self.netns_holder else None
        for proc in reversed(self.started):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in self.started:
            proc.wait(timeout=30)
        if netns:
            deadline = time.monotonic() + 30
            while left := [p for p in self.processes(netns) if p != os.getpid()]:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Ray test cluster: processes left after stop: {left}")
                time.sleep(0.2)
        self.started.clear()
        shutil.rmtree(self.temp, ignore_errors=True)
