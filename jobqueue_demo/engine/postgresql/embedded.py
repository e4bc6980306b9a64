"""The private throwaway PostgreSQL cluster, the default for --engine postgresql without a DSN.

The throwaway cluster is made as the MariaDB one is (mysql/embedded.py): `initdb` runs once into a
cached template (~/.cache/jobqueue-demo/postgresql-<version>-<digest>), each run copies it
into a temp dir of its own and starts `postgres` there, listening on a Unix socket in that
dir only (listen_addresses=''). fsync stays on, as in production: a lesson's timings are
those of a real server. deadlock_timeout is 100 ms (the default is 1 s) so that a deadlock
lesson answers at once; lessons say so.

PostgreSQL refuses to run as root; as root, initdb and postgres run as the tool's own system
user (os_user.py), in directories it owns (root's home is not readable by it). Only the tool
logs in as the superuser: each run's pg_hba.conf lets the superuser in by peer authentication
from the tool's OS user alone, and every other role by its password, so neither a program the
server runs nor another run's reaches it through the socket.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import ServerError, StartFailed
from ..os_user import Identity, check_reachable, client_name, give, preexec, server_identity
from ..owner import hold
from ..throwaway import ThrowawayProcess, die_with_parent, inode_of, run_command
from .server import DEFAULT_PORT, SUPERUSER, PgParams, parse_version

BIN_GLOB = "/usr/lib/postgresql/*/bin"
TEMPLATE_PREFIX = "postgresql-"
WORKDIR_PREFIX = "jobqueue-demo-pg-"
LOG_NAME = "postgres.log"
PEER_MAP = "tool"
DEADLOCK_TIMEOUT = "100ms"
INITDB_OPTIONS = (
    "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8",
    # 1 MB WAL segments, not 16: the WAL directory is copied on every start.
    "--wal-segsize=1",
    # The template is copied, never run: its own durability does not matter.
    "--no-sync",
)
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.005
INITDB_TIMEOUT_S = 300


@dataclass(frozen=True)
class PgBinaries:
    bindir: Path
    version_text: str
    version: str

    @property
    def template_key(self) -> str:

        # initdb's options too: a template made with other options is another template.
        digest = hashlib.sha256(" ".join((self.version_text, *INITDB_OPTIONS)).encode()).hexdigest()[:12]
        return f"{TEMPLATE_PREFIX}{self.version}-{digest}"


def find_binaries() -> PgBinaries:
    """initdb and postgres: where `pg_config --bindir` says, else the newest /usr/lib/postgresql/*/bin."""
    candidates = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10).stdout.strip()
        if bindir:
            candidates.append(Path(bindir))

    versions = sorted(glob.glob(BIN_GLOB), key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0)
    candidates += [Path(p) for p in reversed(versions)]
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            text = run_command([str(bindir / "postgres"), "--version"], "postgres --version").strip()
            return PgBinaries(bindir, text, parse_version(text))
    raise ServerError(
        "no PostgreSQL server binaries (initdb, postgres) found via pg_config --bindir or in "
        f"{BIN_GLOB}: install postgresql (make install does), or name a server with --dsn postgresql://..."
    )


def _run_as(command: list[str], what: str, timeout: float, identity: Identity | None) -> str:
    return run_command(command, what, timeout, preexec(identity, die_with_parent()))


def rebuild_template(binaries: PgBinaries, broken: int | None) -> Path:
    """Replace the cached template whose folder had inode `broken` (a server did not start from
    it) by a fresh one; if another process has already replaced it, use theirs."""
    from ..throwaway import cache_root, discard, locked

    root = cache_root()
    final = root / binaries.template_key
    try:
        with locked(root / f"{binaries.template_key}.lock"):
            if inode_of(final) in (broken, None):
                discard(final)  # renamed aside first: a run starting now finds none, not half of one
                _build_template(binaries, final)
    except OSError as exc:
        raise ServerError(f"cannot rebuild the PostgreSQL template in {root}: {exc}") from exc
    return final


def ensure_template(binaries: PgBinaries) -> Path:
    """The cached initialised data directory for these binaries, made on first use."""
    from ..throwaway import cache_root, locked

    root = cache_root()
    final = root / binaries.template_key
    if not (final / "PG_VERSION").is_file():
        try:
            root.mkdir(parents=True, exist_ok=True)
            with locked(root / f"{binaries.template_key}.lock"):
                if not (final / "PG_VERSION").is_file():
                    _build_template(binaries, final)
        except OSError as exc:
            raise ServerError(f"cannot make the PostgreSQL template in {root}: {exc}") from exc
    return final


def _build_template(binaries: PgBinaries, final: Path) -> None:
    """Under the template's lock: any earlier build dir belongs to a process that died."""
    identity = server_identity()
    for stale in final.parent.glob(f"{final.name}.build-*"):
        shutil.rmtree(stale, ignore_errors=True)
    # initdb runs as the server's user, which may not write in the cache: it works in a temp dir.
    build = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX + "initdb-"))
    try:
        give(build, identity)
        datadir = build / "data"
        command = [str(binaries.bindir / "initdb"), "-D", str(datadir), *INITDB_OPTIONS]
        _run_as(command, "initdb", INITDB_TIMEOUT_S, identity)
        staging = Path(tempfile.mkdtemp(prefix=final.name + ".build-", dir=final.parent))
        shutil.copytree(datadir, staging / "data", symlinks=True)
        os.rename(staging / "data", final)
        staging.rmdir()
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _only_the_tool_is_superuser(datadir: Path) -> None:
    """The template's trust authentication replaced: the superuser by peer authentication from
    this process's OS user only, every other role (a run's own) by its password."""
    (datadir / "pg_ident.conf").write_text(f"{PEER_MAP} {client_name()} {SUPERUSER}\n")
    (datadir / "pg_hba.conf").write_text(
        f"local all {SUPERUSER} peer map={PEER_MAP}\nlocal all all scram-sha-256\n"
    )


def server_command(binaries: PgBinaries, workdir: Path) -> list[str]:
    settings = {
        "listen_addresses": "",
        "unix_socket_directories": str(workdir),
        "port": str(DEFAULT_PORT),
        "deadlock_timeout": DEADLOCK_TIMEOUT,
        "shared_buffers": "16MB",
        "max_connections": "100",
        "logging_collector": "off",
        "log_destination": "stderr",
        # A lesson's sessions sit idle between steps; nothing may end them behind its back.
        "idle_in_transaction_session_timeout": "0",
        # In files of the data directory, removed with it: POSIX segments (/dev/shm) would
        # outlive a killed server (shm.py).
        "dynamic_shared_memory_type": "mmap",
    }
    command = [str(binaries.bindir / "postgres"), "-D", str(workdir / "data")]
    for name, value in settings.items():
        command += ["-c", f"{name}={value}"]
    return command


class EmbeddedPostgres(ThrowawayProcess):
    """A private, throwaway PostgreSQL cluster on a Unix socket, stopped and deleted on exit."""

    @property
    def params(self) -> PgParams:
        if self.workdir is None:
            raise ServerError("the embedded PostgreSQL server is not running")
        return PgParams(host="localhost", user=SUPERUSER, database="postgres", socket_dir=str(self.workdir))

    def start(self) -> None:
        binaries = find_binaries()
        template = ensure_template(binaries)
        broken = inode_of(template)
        try:
            self._start_from(binaries, template)
        except StartFailed as exc:
            # A damaged cache would fail every later run the same way; a fresh template is 1-2 s.
            import logging

            logging.getLogger(__name__).warning("jobqueue-demo: %s; rebuilding the cached PostgreSQL template once", exc)
            self._start_from(binaries, rebuild_template(binaries, broken))

    def _start_from(self, binaries: PgBinaries, template: Path) -> None:
        with self.starting("embedded PostgreSQL server"):
            self._boot(binaries, template)

    def _boot(self, binaries: PgBinaries, template: Path) -> None:
        identity = server_identity()
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        self._owner = hold(self.workdir)
        check_reachable(self.workdir.parent, identity)
        shutil.copytree(template, self.workdir / "data", symlinks=True)
        _only_the_tool_is_superuser(self.workdir / "data")
        give(self.workdir, identity)
        log_path = self.workdir / LOG_NAME
        with open(log_path, "ab") as log:
            # A session of its own keeps the terminal's Ctrl-C away from it; we stop it ourselves.
            self._process = subprocess.Popen(
                server_command(binaries, self.workdir), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=preexec(identity, die_with_parent()),
            )
        self._wait_until_ready(log_path)

    def _wait_until_ready(self, log_path: Path) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                raise StartFailed(
                    f"the embedded PostgreSQL server exited with code {self._process.returncode} while starting: "
                    f"{_log_summary(log_path)}"
                )
            if self._answers():
                return
            if time.monotonic() > deadline:
                raise StartFailed(
                    f"the embedded PostgreSQL server did not accept connections within {START_TIMEOUT_S:.0f} s: "
                    f"{_log_summary(log_path)}"
                )
            time.sleep(POLL_INTERVAL_S)

    def _answers(self) -> bool:
        from .libpq import LibpqError, PGconn, conninfo

        try:
            PGconn.connect(conninfo(self.params.conninfo()), POLL_INTERVAL_S * 10).finish()
        except LibpqError:
            return False
        return True

    def end(self, process: subprocess.Popen) -> None:
        # SIGQUIT is PostgreSQL's immediate shutdown: the postmaster ends every backend at once,
        # without the checkpoint a smart or fast shutdown writes; the data is thrown away anyway.
        try:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGQUIT)
                # A frozen (SIGSTOPped) postmaster acts on it only once it runs again: before,
                # the stop waited STOP_TIMEOUT_S for it.
                process.send_signal(signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_TIMEOUT_S)
        finally:
            # Also when the postmaster was killed: its backends would outlive it for a while,
            # attached to its shared memory.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _log_summary(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    errors = [line for line in lines if "FATAL" in line or "ERROR" in line]
    return " | ".join((errors or lines)[-3:]) or "(no output)"
