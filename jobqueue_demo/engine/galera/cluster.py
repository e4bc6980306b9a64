"""A private Galera cluster on this machine: N MariaDB nodes on 127.0.0.1, thrown away on exit.

No node ever needs a state transfer (SST), which fails on stock Debian with rsync: every node
starts from a copy of one cached data directory that a single bootstrapped node left behind
after a clean shutdown (grastate.dat then names the cluster's state UUID and a real seqno).
Each copy also gets a gvwstate.dat naming all N nodes as the last primary component, the file
Galera itself writes to re-form a cluster after a full outage (pc.recovery): the nodes find
each other, see the same UUID:seqno everywhere and form the primary component with no
bootstrap and no transfer. A node's SQL port on 127.0.0.1 lets in only the run's own
user, by its password: root logs in by unix_socket authentication on the node's socket, as on
the embedded server (embedded.py), and the nodes run as its OS user. The process handling (PDEATHSIG, the owner marker the leftovers
sweep reads, the atexit stop) is the embedded server's, from embedded.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from ...errors import ServerError, StartFailed, UsageError
from .. import throwaway
from ..deadlines import uninterrupted
from ..mysql import control
from ..mysql import embedded as emb
from ..mysql import server as srv
from ..os_user import Identity, check_reachable, client_name, give, server_identity
from ..owner import hold
from ..types import ServerInfo
from .engine import ENGINE

PROVIDER_PATHS = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/galera-4/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
    "/usr/lib64/galera/libgalera_smm.so",
)
TEMPLATE_SUFFIX = "-galera"
GRASTATE = "grastate.dat"
GVWSTATE = "gvwstate.dat"
GROUP_FILE = "galera.cnf"
# A node's write-set cache is preallocated; the default 128 MB would be copied on every start.
GCACHE_SIZE = "8M"
# Galera's group handshake is tuned for networks: join messages resent every second, 3 s of
# announcements and a keepalive every second make a local start 2-3 s; these make it under
# 1 s. Failure detection (evs.suspect_timeout, evs.inactive_timeout) keeps its defaults.
FAST_JOIN = (
    "evs.join_retrans_period=PT0.1S;pc.announce_timeout=PT0.5S;"
    "evs.inactive_check_period=PT0.1S;evs.keepalive_period=PT0.1S"
)
APPLIER_THREADS = 4
JOIN_TIMEOUT_S = 60.0
SHUTDOWN_TIMEOUT_S = 60.0
MAX_NODES = 9
PORTS_PER_NODE = 3  # SQL, Galera group communication, incremental state transfer
# A port found free may be taken by another process before a node binds it.
START_ATTEMPTS = 3
NODE_DSN = re.compile(r"^node(\d+)=(.+)$", re.DOTALL)


@dataclass(frozen=True)
class ClusterInfo:
    """The nodes of a cluster, node 1 first; node numbers count from 1."""

    nodes: tuple[ServerInfo, ...]

    def node(self, number: int) -> ServerInfo:
        return self.nodes[number - 1]

    def as_server(self) -> ServerInfo:
        """Node 1, with every node: what a run on the cluster is handed."""
        return replace(self.node(1), nodes=tuple(node.params for node in self.nodes))

    @property
    def size(self) -> int:
        return len(self.nodes)


def find_provider() -> Path:
    for path in PROVIDER_PATHS:
        if Path(path).is_file():
            return Path(path)
    raise ServerError(
        "no Galera provider (libgalera_smm.so) found: install the galera-4 package (`make install` does)"
    )


def parse_node_dsns(dsns: list[str]) -> list[srv.ConnectParams]:
    """`node1=mysql://…`, `node2=…`: an existing cluster's nodes, in node order, numbered 1..N."""
    numbered: dict[int, srv.ConnectParams] = {}
    for text in dsns:
        match = NODE_DSN.match(text.strip())
        if not match:
            raise UsageError("a cluster's --dsn reads nodeN=mysql://user@host:port/db, one per node")
        number = int(match.group(1))
        if number in numbered:
            raise UsageError(f"--dsn node{number}= given twice")
        numbered[number] = srv.parse_dsn(match.group(2))
    if sorted(numbered) != list(range(1, len(numbered) + 1)):
        raise UsageError("a cluster's --dsn must name node1, node2, … with no gaps")
    return [numbered[n] for n in sorted(numbered)]


@contextlib.contextmanager
def open_cluster(size: int = 3, dsns: list[str] | None = None) -> Iterator[ClusterInfo]:
    """The nodes named by `dsns` (nodeN=…), else a private embedded cluster of `size` nodes."""
    if dsns:
        yield ClusterInfo(tuple(ENGINE.server_info(p, embedded=False) for p in parse_node_dsns(dsns)))
        return
    with EmbeddedCluster(size) as cluster:
        yield ClusterInfo(tuple(ENGINE.server_info(p, embedded=True) for p in cluster.params))


# --- the cached cluster template ------------------------------------------------


def ensure_cluster_template(binary: emb.ServerBinary, provider: Path) -> tuple[emb.Template, Path]:
    """(the plain template, a data directory holding a cluster's state), made on first use."""
    template = emb.ensure_template(binary)
    root = throwaway.cache_root()
    key = binary.template_key + TEMPLATE_SUFFIX
    final = root / key
    if not (final / GRASTATE).is_file():
        try:
            with throwaway.locked(root / f"{key}.lock"):
                if not (final / GRASTATE).is_file():
                    _build_cluster_template(binary, template, provider, final)
        except OSError as exc:
            raise ServerError(f"cannot make the cluster template in {root}: {exc}") from exc
    return template, final


def _build_cluster_template(binary: emb.ServerBinary, template: emb.Template, provider: Path, final: Path) -> None:
    shutil.rmtree(final, ignore_errors=True)
    # The node runs in the temporary directory, not in the cache: a socket path longer than
    # 107 bytes (a deep $XDG_CACHE_HOME) stops the server.
    build = Path(tempfile.mkdtemp(prefix=throwaway.WORKDIR_PREFIX))
    owner = hold(build)  # a build killed half-way is swept like any dead run's directory
    identity = server_identity()
    node = Node(build / "node", 1, template.datadir, free_ports(PORTS_PER_NODE), identity)
    staged = None
    try:
        check_reachable(build.parent, identity)
        give(build, identity)
        node.prepare()
        # One node that founds the cluster: gcomm:// with nobody to meet.
        node.launch(binary, template, provider, "gcomm://", new_group(), ("--wsrep-new-cluster",))
        emb.wait_until_ready(node.process, node.params, node.log)
        # A clean shutdown (SIGTERM) writes the cluster's UUID and last seqno into grastate.dat.
        node.process.terminate()
        node.process.wait(SHUTDOWN_TIMEOUT_S)
        data = node.workdir / "data"
        if "seqno:   -1" in (data / GRASTATE).read_text():
            raise StartFailed(f"the bootstrap node saved no seqno: {throwaway.log_summary(node.log)}")
        for transient in ("galera.cache", GVWSTATE):
            with contextlib.suppress(FileNotFoundError):
                (data / transient).unlink()
        staged = Path(tempfile.mkdtemp(prefix=f"{final.name}.build-", dir=final.parent))
        # A copy, not a move: the node's files are its OS user's, the cache's stay ours.
        shutil.copytree(data, staged / "data", symlinks=True)
        os.rename(staged / "data", final)  # atomic: readers see no template or a complete one
    except BaseException:
        node.kill()
        raise
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        throwaway.remove_workdir(build, owner)


# --- one node ------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free now; all probes are held open together so none repeats.

    Another process may still take one before a node binds it: start() then retries."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]


class Node:
    """One mariadbd with wsrep on: its own data, socket, tmp dir, SQL port and Galera ports."""

    def __init__(self, workdir: Path, number: int, source: Path, ports: list[int], identity: Identity | None) -> None:
        self.workdir = workdir
        self.identity = identity  # who the node runs as
        self.number = number
        self.source = source
        self.port, self.gcomm_port, self.ist_port = ports
        self.gcomm_id = str(uuid.uuid4())
        self.process = None

    @property
    def log(self) -> Path:
        return self.workdir / emb.ERROR_LOG_NAME

    @property
    def params(self) -> srv.ConnectParams:
        return srv.ConnectParams(host="localhost", user=client_name(), unix_socket=str(self.workdir / emb.SOCKET_NAME))

    def prepare(self, view: str | None = None) -> None:
        """The node's folders, given to its OS user; `view` written as its gvwstate.dat."""
        self.workdir.mkdir()
        shutil.copytree(self.source, self.workdir / "data")
        if view is not None:
            (self.workdir / "data" / GVWSTATE).write_text(view)
        for sub in (emb.FILES_DIR, "tmp"):
            (self.workdir / sub).mkdir()
        give(self.workdir, self.identity)

    def launch(self, binary, template, provider: Path, address: str, group: str, extra: tuple[str, ...] = ()) -> None:
        plain = emb.server_command(binary, template, self.workdir)
        options = f"--defaults-file={self.group_file(group)}"
        command = [options if arg == "--no-defaults" else arg for arg in plain if arg != "--skip-networking"] + [
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--wsrep-on=ON",
            f"--wsrep-provider={provider}",
            f"--wsrep-cluster-address={address}",
            f"--wsrep-node-address=127.0.0.1:{self.gcomm_port}",
            f"--wsrep-node-name=node{self.number}",
            "--wsrep-provider-options="
            f"gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm_port};"
            f"ist.recv_addr=127.0.0.1:{self.ist_port};gcache.size={GCACHE_SIZE};{FAST_JOIN}",
            # Galera replicates row images, and interleaved auto-increment locks only.
            "--binlog-format=ROW",
            "--innodb-autoinc-lock-mode=2",
            # With one applier thread a node can hang for good (3 of 164 runs of
            # `workers --cluster 3` here): its applier waits for a row lock held by a local transaction
            # that is in COMMIT, whose certification waits for the write sets queued behind that
            # same applier; the BF abort never frees the lock and flow control then stops every
            # node. More appliers certify the queued write sets, the local transaction fails
            # certification and lets go.
            f"--wsrep-slave-threads={APPLIER_THREADS}",
            "--default-storage-engine=InnoDB",
            *extra,
        ]
        self.process = throwaway.launch(command, self.log, self.identity)

    def group_file(self, group: str) -> Path:
        """The cluster's name in an option file only the node's OS user reads: not on the
        command line, which every local user reads in /proc."""
        path = self.workdir / GROUP_FILE
        path.write_text(f"[mysqld]\nwsrep_cluster_name={group}\n")
        path.chmod(0o600)
        give(path, self.identity)
        return path

    def kill(self) -> None:
        if self.process is not None:
            throwaway.terminate(self.process)
            self.process = None


def new_group() -> str:
    """A cluster name nobody can guess. Galera lets any process that reaches a node's group
    port (127.0.0.1) join the cluster and receive every write set: the one thing a peer must
    give is the cluster's name, checked by the node it connects to (which never says it)."""
    return f"jobqueue-demo-{secrets.token_hex(8)}"  # Galera takes names of fewer than 32 bytes


def _view(me: Node, nodes: list[Node]) -> str:
    """The last primary component, as Galera saves it: all nodes, re-formed when all are back."""
    members = "".join(f"member: {n.gcomm_id} 0\n" for n in nodes)
    return f"my_uuid: {me.gcomm_id}\n#vwbeg\nview_id: 3 {nodes[0].gcomm_id} 1\nbootstrap: 0\n{members}#vwend\n"


class EmbeddedCluster(throwaway.Throwaway):
    """`size` private Galera nodes, stopped and deleted on exit; `params` per node, node 1 first."""

    def __init__(self, size: int = 3) -> None:
        if not 2 <= size <= MAX_NODES:
            raise UsageError(f"--cluster takes 2 to {MAX_NODES} nodes")
        self.size = size
        self.workdir: Path | None = None
        self.nodes: list[Node] = []
        self._owner = None

    @property
    def params(self) -> list[srv.ConnectParams]:
        return [n.params for n in self.nodes]

    def start(self) -> None:
        binary = emb.find_server_binary()
        provider = find_provider()
        template, datadir = ensure_cluster_template(binary, provider)
        with self.starting("embedded cluster"):
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    self._boot(binary, template, provider, datadir)
                    return
                except StartFailed:
                    if attempt == START_ATTEMPTS:
                        raise
                    self._discard_nodes()

    def _boot(self, binary, template, provider: Path, datadir: Path) -> None:
        identity = server_identity()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=throwaway.WORKDIR_PREFIX))
            self._owner = hold(self.workdir)
            check_reachable(self.workdir.parent, identity)
            give(self.workdir, identity)  # the nodes' folders are made inside it, then given
        ports = free_ports(PORTS_PER_NODE * self.size)
        self.nodes = [
            Node(self.workdir / f"node{i}", i, datadir, ports[(i - 1) * PORTS_PER_NODE : i * PORTS_PER_NODE], identity)
            for i in range(1, self.size + 1)
        ]
        address = "gcomm://" + ",".join(f"127.0.0.1:{n.gcomm_port}" for n in self.nodes)
        group = new_group()
        for node in self.nodes:
            node.prepare(_view(node, self.nodes))
            node.launch(binary, template, provider, address, group)
        for node in self.nodes:
            emb.wait_until_ready(node.process, node.params, node.log)
        self._wait_primary()

    def _wait_primary(self) -> None:
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for node in self.nodes:
            conn = node.params.connect()
            try:
                while _status(conn, "wsrep_cluster_size") != str(self.size) or _status(conn, "wsrep_ready") != "ON":
                    if time.monotonic() > deadline:
                        raise StartFailed(
                            f"node{node.number} did not join a {self.size}-node cluster within "
                            f"{JOIN_TIMEOUT_S:.0f} s: {throwaway.log_summary(node.log)}"
                        )
                    time.sleep(emb.POLL_INTERVAL_S * 5)
            finally:
                conn.close()

    def _discard_nodes(self) -> None:
        """Every node stopped and its directory removed; the run's directory stays."""
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.kill()
            shutil.rmtree(node.workdir, ignore_errors=True)

    @uninterrupted()
    def stop(self) -> None:
        nodes, workdir = self.nodes, self.workdir
        self.nodes, self.workdir = [], None
        self.stopping()
        try:
            for node in nodes:
                node.kill()
        finally:
            owner, self._owner = self._owner, None
            throwaway.remove_workdir(workdir, owner)


def _status(conn, name: str) -> str | None:
    found = control.rows(conn, f"SHOW GLOBAL STATUS LIKE '{name}'")
    return control.text(found[0][1]) if found else None
