"""A real Switchboard cluster for end-to-end tests: three `switchboard serve` processes forming a
Raft group, with a real nginx in front of them doing plain round-robin (no session affinity).

    with Cluster(elicitation_timeout="2s") as c:
        c.url                 # the front door, http://127.0.0.1:PORT/mcp (through nginx)
        c.node_urls[i]        # node i's own MCP endpoint
        c.metrics_urls[i]     # node i's /metrics
        c.peer_addrs[i]       # node i's peer address (Raft RPC + admin API)
        c.leader()            # the Raft leader, from `switchboard cluster status`
        c.kill(i)             # SIGKILL node i
        c.metrics(i)          # {(name, ((label, value), ...)): value}
        c.metric(i, "switchboard_orphan_responses_total", reason="tampered")

Everything (data dirs, secrets, logs, nginx config, pid and temp files) lives in one temporary
directory that is removed when the cluster stops, unless SWITCHBOARD_E2E_KEEP=1 or the cluster
failed to start. `logs()` returns the tail of every log for failure reports.

Environment: SWITCHBOARD_BIN (default: <repo>/target/debug/switchboard), NGINX_BIN (default:
`nginx` on PATH, else /usr/sbin/nginx), SWITCHBOARD_E2E_LOG (the nodes' log filter, default
`info,openraft=warn`), SWITCHBOARD_E2E_KEEP=1 (keep the temporary directory). Other
SWITCHBOARD_* variables are not passed to the nodes, so flags stay exactly as written here.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# How long a cluster may take to come up (all nodes ready, nginx answering).
START_TIMEOUT_S = 60.0


class ClusterError(RuntimeError):
    pass


def switchboard_bin(wait_s: float = 120.0) -> Path:
    """The binary under test. It may be rebuilt underneath us (cargo replaces the file), so wait
    for it to reappear rather than fail at once."""
    path = Path(os.environ.get("SWITCHBOARD_BIN") or REPO_ROOT / "target" / "debug" / "switchboard").resolve()
    deadline = time.monotonic() + wait_s
    while not (path.is_file() and os.access(path, os.X_OK)):
        if time.monotonic() > deadline:
            raise ClusterError(f"switchboard binary not found at {path} (set SWITCHBOARD_BIN or build it)")
        time.sleep(0.5)
    return path


def nginx_bin() -> Path:
    found = os.environ.get("NGINX_BIN") or shutil.which("nginx")
    if not found and os.access("/usr/sbin/nginx", os.X_OK):
        found = "/usr/sbin/nginx"
    if not found:
        raise ClusterError("nginx not found (scripts/e2e.sh installs it; or set NGINX_BIN)")
    return Path(found).resolve()


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (all held open together while choosing, so no repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def serve_help(binary: Path) -> str:
    out = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=30)
    return out.stdout + out.stderr


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text exposition → {(metric name, sorted label pairs): value}."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        pairs = tuple(sorted((k, bytes(v, "utf-8").decode("unicode_escape")) for k, v in _LABEL.findall(labels or "")))
        try:
            samples[(name, pairs)] = float(value)
        except ValueError:
            continue
    return samples


@dataclass
class Node:
    id: int
    port: int
    metrics_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    log_file: object | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def peer_addr(self) -> str:
        return f"127.0.0.1:{self.peer_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Cluster:
    """Three nodes + nginx. Use as a context manager (or call start()/stop())."""

    size: int = 3
    elicitation_timeout: str = "2s"
    sampling_timeout: str = "2s"
    heartbeat_interval: str = "50ms"
    election_timeout: str = "300ms"
    tools: str = "default"
    extra_args: tuple[str, ...] = ()
    name: str = "cluster"

    nodes: list[Node] = field(default_factory=list, init=False)
    workdir: Path | None = field(default=None, init=False)
    front_port: int = field(default=0, init=False)
    binary: Path | None = field(default=None, init=False)
    secret_file: Path | None = field(default=None, init=False)
    key_file: Path | None = field(default=None, init=False)
    uses_encryption_key: bool = field(default=False, init=False)
    _nginx: subprocess.Popen | None = field(default=None, init=False)
    _nginx_log: object | None = field(default=None, init=False)
    _keep: bool = field(default=False, init=False)

    # ---- addresses -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The front door (nginx) MCP endpoint."""
        return f"http://127.0.0.1:{self.front_port}/mcp"

    @property
    def node_urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def metrics_urls(self) -> list[str]:
        return [n.metrics_url for n in self.nodes]

    @property
    def peer_addrs(self) -> list[str]:
        return [n.peer_addr for n in self.nodes]

    def alive_nodes(self) -> list[int]:
        return [n.id for n in self.nodes if n.alive()]

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._keep = self._keep or os.environ.get("SWITCHBOARD_E2E_KEEP") == "1"
        self.stop()

    def start(self) -> Cluster:
        self.binary = switchboard_bin()
        nginx = nginx_bin()
        for attempt in range(1, 4):
            self.workdir = Path(tempfile.mkdtemp(prefix=f"switchboard-e2e-{self.name}-"))
            try:
                self._start_nodes()
                self._wait_ready()
                self._start_nginx(nginx)
                return self
            except BaseException as e:
                report = self.logs()
                # A free port chosen here can be taken by someone else before the node binds it.
                retry = attempt < 3 and isinstance(e, ClusterError) and "in use" in report
                self._keep = not retry
                self.stop()
                if not retry:
                    raise ClusterError(f"{self.name}: cluster did not start: {e}\n(kept {self.workdir})\n{report}") from e
                self._reset()
        raise AssertionError("unreachable")

    def _reset(self) -> None:
        self.nodes = []
        self._nginx = None
        self._nginx_log = None
        self._keep = False

    def _start_nodes(self) -> None:
        assert self.workdir and self.binary
        help_text = serve_help(self.binary)
        self.secret_file = self.workdir / "cluster-secret"
        self.secret_file.write_text(secrets.token_hex(32) + "\n")
        self.secret_file.chmod(0o600)
        # Newer binaries need the shared id-encryption key with --peers; older ones have no flag.
        self.uses_encryption_key = "--encryption-key-file" in help_text
        if self.uses_encryption_key:
            self.key_file = self.workdir / "encryption-key"
            self.key_file.write_text(secrets.token_hex(32) + "\n")
            self.key_file.chmod(0o600)

        ports = free_ports(3 * self.size + 1)
        self.front_port = ports.pop()
        for i in range(self.size):
            node_dir = self.workdir / f"node{i}"
            node_dir.mkdir()
            self.nodes.append(
                Node(
                    id=i,
                    port=ports[3 * i],
                    metrics_port=ports[3 * i + 1],
                    peer_port=ports[3 * i + 2],
                    data_dir=node_dir / "data",
                    log_path=self.workdir / f"node{i}.log",
                )
            )
        peers = ",".join(f"{n.id}={n.peer_addr}" for n in self.nodes)
        for n in self.nodes:
            args = [
                str(self.binary), "serve",
                "--node-id", str(n.id),
                "--listen", f"127.0.0.1:{n.port}",
                "--metrics-listen", f"127.0.0.1:{n.metrics_port}",
                "--peer-listen", n.peer_addr,
                "--advertise-peer", n.peer_addr,
                "--data-dir", str(n.data_dir),
                "--peers", peers,
                "--cluster-secret-file", str(self.secret_file),
                "--heartbeat-interval", self.heartbeat_interval,
                "--election-timeout", self.election_timeout,
                "--elicitation-timeout", self.elicitation_timeout,
                "--sampling-timeout", self.sampling_timeout,
                "--tools", self.tools,
                *self.extra_args,
            ]  # fmt: skip
            if self.uses_encryption_key:
                args += ["--encryption-key-file", str(self.key_file)]
            env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
            env["SWITCHBOARD_LOG"] = os.environ.get("SWITCHBOARD_E2E_LOG", "info,openraft=warn")
            env["NO_COLOR"] = "1"
            env.setdefault("RUST_BACKTRACE", "1")
            n.log_file = open(n.log_path, "wb")
            n.log_file.write((" ".join(args) + "\n").encode())
            n.log_file.flush()
            n.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=n.log_file, stderr=subprocess.STDOUT,
                env=env, cwd=str(self.workdir), start_new_session=True,
            )  # fmt: skip

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        pending = {n.id for n in self.nodes}
        while pending:
            for n in self.nodes:
                if n.id in pending:
                    if not n.alive():
                        raise ClusterError(f"node {n.id} exited with {n.proc.returncode if n.proc else None}")
                    if _http_status(f"http://127.0.0.1:{n.metrics_port}/readyz") == 200:
                        pending.discard(n.id)
            if pending:
                if time.monotonic() > deadline:
                    raise ClusterError(f"nodes {sorted(pending)} not ready after {START_TIMEOUT_S:.0f}s")
                time.sleep(0.05)

    def nginx_conf(self) -> str:
        assert self.workdir
        w = self.workdir
        user = "user root;\n" if os.geteuid() == 0 else ""  # workers must reach the temp dir
        servers = "\n".join(f"        server 127.0.0.1:{n.port};" for n in self.nodes)
        return f"""# generated by tests/e2e/cluster.py
daemon off;
master_process on;
worker_processes 1;
{user}pid {w}/nginx.pid;
error_log {w}/nginx-error.log info;

events {{
    worker_connections 1024;
}}

http {{
    log_format switchboard '$remote_addr "$request" $status upstream=$upstream_addr '
                           'node=$upstream_http_x_switchboard_node session=$http_mcp_session_id '
                           'time=$request_time';
    access_log {w}/nginx-access.log switchboard;
    client_body_temp_path {w}/nginx-temp/client_body;
    proxy_temp_path {w}/nginx-temp/proxy;
    fastcgi_temp_path {w}/nginx-temp/fastcgi;
    uwsgi_temp_path {w}/nginx-temp/uwsgi;
    scgi_temp_path {w}/nginx-temp/scgi;

    # Plain round-robin over the three MCP endpoints: no session affinity of any kind.
    upstream switchboard {{
{servers}
    }}

    server {{
        listen 127.0.0.1:{self.front_port};
        client_max_body_size 8m;

        location / {{
            proxy_pass http://switchboard;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 300s;
            chunked_transfer_encoding on;
        }}
    }}
}}
"""

    def _start_nginx(self, nginx: Path) -> None:
        assert self.workdir
        (self.workdir / "nginx-temp").mkdir()
        conf = self.workdir / "nginx.conf"
        conf.write_text(self.nginx_conf())
        self._nginx_log = open(self.workdir / "nginx-stderr.log", "wb")
        cmd = [str(nginx), "-c", str(conf), "-p", str(self.workdir), "-e", str(self.workdir / "nginx-error.log")]
        self._nginx = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._nginx_log, stderr=subprocess.STDOUT,
            cwd=str(self.workdir), start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while True:
            if self._nginx.poll() is not None:
                raise ClusterError(f"nginx exited with {self._nginx.returncode}")
            # Any answer from an upstream (it carries x-switchboard-node) means the chain works.
            if _http_status(self.url, method="GET", want_header="x-switchboard-node") is not None:
                return
            if time.monotonic() > deadline:
                raise ClusterError("nginx front door not answering")
            time.sleep(0.05)

    def stop(self) -> None:
        procs = []
        if self._nginx is not None:
            procs.append(self._nginx)
        procs += [n.proc for n in self.nodes if n.proc is not None]
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM if p is not self._nginx else signal.SIGQUIT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for f in [self._nginx_log, *(n.log_file for n in self.nodes)]:
            if f is not None:
                f.close()
        if self.workdir and self.workdir.exists() and not self._keep and os.environ.get("SWITCHBOARD_E2E_KEEP") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- fault injection -------------------------------------------------------------------

    def kill(self, node: int) -> None:
        """SIGKILL node `node` (no graceful shutdown) and reap it."""
        n = self.nodes[node]
        if n.proc is not None and n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait(timeout=10)

    # ---- observation -----------------------------------------------------------------------

    def status(self, node: int, timeout: float = 10.0) -> dict:
        """`switchboard cluster status -o json` through node `node`'s peer port."""
        assert self.binary and self.secret_file
        cmd = [
            str(self.binary), "cluster", "-o", "json",
            "--peer", self.nodes[node].peer_addr,
            "--cluster-secret-file", str(self.secret_file),
            "status",
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise ClusterError(f"cluster status via node {node} failed ({out.returncode}): {out.stderr.strip()}")
        return json.loads(out.stdout)

    def leader(self, timeout: float = 10.0, among: list[int] | None = None) -> int:
        """The current Raft leader, as reported by a live node; waits (bounded) while there is
        none, or while it is not one of `among` (e.g. after killing the old leader)."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            for i in self.alive_nodes():
                try:
                    leader = self.status(i).get("leader")
                except (ClusterError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                    last = e
                    continue
                last = leader
                if leader is not None and (among is None or leader in among):
                    return int(leader)
            if time.monotonic() > deadline:
                raise ClusterError(f"no leader among {among or 'the live nodes'} after {timeout}s (last: {last!r})")
            time.sleep(0.1)

    def metrics(self, node: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(self.nodes[node].metrics_url, timeout=5) as r:
            return parse_prometheus(r.read().decode())

    def metric(self, node: int, name: str, **labels: str) -> float:
        """Sum of the samples of `name` on `node` whose labels include `labels` (0 if none)."""
        want = set(labels.items())
        return sum(v for (n, pairs), v in self.metrics(node).items() if n == name and want <= set(pairs))

    def nodes_per_session(self) -> dict[str, set[str]]:
        """From nginx's access log: for each MCP session id, the replicas (x-switchboard-node)
        that answered its requests."""
        assert self.workdir
        served: dict[str, set[str]] = {}
        for line in (self.workdir / "nginx-access.log").read_text(errors="replace").splitlines():
            fields = dict(part.split("=", 1) for part in line.split() if part.startswith(("node=", "session=")))
            node, session = fields.get("node", "-"), fields.get("session", "-")
            if node != "-" and session != "-":
                served.setdefault(session, set()).add(node)
        return served

    def logs(self, tail: int = 60) -> str:
        """The last `tail` lines of every node's log and of nginx's error log."""
        if not self.workdir:
            return ""
        parts = []
        files = [n.log_path for n in self.nodes] + [self.workdir / "nginx-error.log", self.workdir / "nginx-stderr.log"]
        for path in files:
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            if not lines:
                continue
            parts.append(f"----- {path.name} (last {min(tail, len(lines))} of {len(lines)} lines) -----")
            parts.extend(lines[-tail:])
        return "\n".join(parts)


def _http_status(url: str, method: str = "GET", want_header: str | None = None) -> int | None:
    """Status of a quick request (any status counts), None if nothing answered (or the wanted
    header is missing)."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            headers, status = r.headers, r.status
    except urllib.error.HTTPError as e:
        headers, status = e.headers, e.code
    except (urllib.error.URLError, OSError):
        return None
    if want_header and headers.get(want_header) is None:
        return None
    return status
