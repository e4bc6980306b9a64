"""The private throwaway ("embedded") MariaDB or MySQL server, the default when no DSN is given.

Each run gets a fresh copy of a cached, freshly initialised data directory, reachable only
through a unix socket in its own temp dir. As root the server runs as the tool's own system
user (os_user.py), never as root. Its root account (and, when we are not root, the account
named after our OS user) logs in by unix_socket authentication only: no other OS user, nor
a program running as the server's user, logs in as it. server.py imports this module only
when it starts one: a run on a DSN defines none of it (start-up, docs/architecture.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import ServerError, StartFailed, UnusableTemplate
from ..dsn import DSN_ENV
from ..os_user import check_reachable, client_name, give, preexec, server_identity
from ..owner import hold
from ..throwaway import WORKDIR_PREFIX, ThrowawayProcess, cache_root, discard, inode_of, launch, locked, log_summary, run_command
from .server import ConnectParams, parse_version

SERVER_NAMES = ("mariadbd", "mysqld")
INSTALL_DB_NAMES = ("mariadb-install-db", "mysql_install_db")
# Distributions put server daemons in sbin/libexec, which a user's PATH often lacks.
SERVER_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/libexec")
FILES_DIR = "files"
TEMPLATE_META = "template.json"
# Small redo logs keep the template (~26 MB) quick to copy on every start; the
# lessons' few rows need only a small buffer pool.
LOG_FILE_SIZE = "8M"
ROOT_LOGIN = "socket"  # mariadb-install-db's --auth-root-authentication-method
BUFFER_POOL_SIZE = "16M"
SOCKET_NAME = "mysqld.sock"
ERROR_LOG_NAME = "error.log"
# sockaddr_un.sun_path is 108 bytes on Linux (104 on the BSDs), NUL included.
MAX_SOCKET_PATH = 103
START_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.01
INSTALL_TIMEOUT_S = 300


@dataclass
class ServerBinary:
    """A mariadbd or mysqld found on this machine, and the version it reports."""

    path: Path
    version_text: str
    flavor: str
    version: str

    @property
    def template_key(self) -> str:
        # The whole --version text, not just the number, so a rebuilt package
        # of the same version still gets a data directory of its own.
        import hashlib  # here, not at the top: a --dsn run never needs it (start-up, see bench/)

        # The accounts the template holds too: its admin account is named after our OS user.
        seed = "\0".join((self.version_text, ROOT_LOGIN, client_name()))
        digest = hashlib.sha256(seed.encode()).hexdigest()[:12]
        return f"{self.flavor.lower()}-{self.version}-{digest}"


@dataclass
class Template:
    """The cached, freshly initialised data directory each embedded server starts from a copy of."""

    datadir: Path
    log_file_size: str
    plugin_dir: str | None
    # Of the template's folder: tells a rebuilt template from the one that failed.
    inode: int = 0


def find_server_binary() -> ServerBinary:
    found = _which_any(SERVER_NAMES, [os.environ.get("PATH", ""), *SERVER_DIRS])
    if found:
        return _inspect_binary(Path(found))
    raise ServerError(
        f"no {' or '.join(SERVER_NAMES)} found on PATH or in {', '.join(SERVER_DIRS)}: "
        f"install MariaDB or MySQL, or name a running server with {DSN_ENV}"
    )


def _which_any(names: tuple[str, ...], dirs: list[str]) -> str | None:
    search = os.pathsep.join(dirs)
    for name in names:
        found = shutil.which(name, path=search)
        if found:
            return found
    return None


def _inspect_binary(path: Path) -> ServerBinary:
    output = run_command([str(path), "--no-defaults", "--version"], f"{path} --version").strip()
    # The output starts with the path it was run as, which must not change the
    # template key (Debian's mysqld is a link to mariadbd).
    version_text = output.removeprefix(str(path)).strip()
    flavor, version = parse_version(version_text)
    return ServerBinary(path=path, version_text=version_text, flavor=flavor, version=version)


def ensure_template(binary: ServerBinary) -> Template:
    """The cached initialised data directory for this server build, made on first use."""
    root = cache_root()
    final = root / binary.template_key
    if not final.is_dir():
        try:
            root.mkdir(parents=True, exist_ok=True)
            with locked(root / f"{binary.template_key}.lock"):
                # Another process may have built it while we waited for the lock.
                if not final.is_dir():
                    _build_template(binary, root, final)
        except OSError as exc:
            raise ServerError(f"cannot make the server template in {root}: {exc}") from exc
    return _load_template(final)


def rebuild_template(binary: ServerBinary, broken: int | None) -> Template:
    """Replace the cached template whose folder had inode `broken` by a fresh one; if
    another process has already replaced it, use theirs."""
    root = cache_root()
    final = root / binary.template_key
    try:
        with locked(root / f"{binary.template_key}.lock"):
            if inode_of(final) in (broken, None):
                discard(final)
                _build_template(binary, root, final)
    except OSError as exc:
        raise ServerError(f"cannot rebuild the server template in {root}: {exc}") from exc
    return _load_template(final)


def _build_template(binary: ServerBinary, root: Path, final: Path) -> None:
    import json  # here and in _load_template: only the embedded server needs it, off a --dsn run's start-up

    # Holding the lock means any earlier build dir belongs to a process that died.
    for stale in root.glob(f"{final.name}.build-*"):
        shutil.rmtree(stale, ignore_errors=True)
    build = Path(tempfile.mkdtemp(prefix=f"{final.name}.build-", dir=root))
    try:
        _initialise(binary, build / "datadir")
        meta = {
            "server": binary.version_text,
            "log_file_size": LOG_FILE_SIZE,
            "plugin_dir": _plugin_dir(binary),
        }
        (build / TEMPLATE_META).write_text(json.dumps(meta, indent=2) + "\n")
        # A rename is atomic: readers see no template or a complete one.
        os.rename(build, final)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise


def _initialise(binary: ServerBinary, datadir: Path) -> None:
    """A fresh data directory at `datadir`, made by the server's user: that user may not enter
    our cache (root's home), so it works in a temp dir of its own, then we copy it over."""
    identity = server_identity()
    work = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX + "install-"))
    try:
        check_reachable(work.parent, identity)
        give(work, identity)
        install = _install_mariadb if binary.flavor == "MariaDB" else _install_mysql
        install(binary, work / "datadir", preexec(identity, None))
        shutil.copytree(work / "datadir", datadir, symlinks=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _install_mariadb(binary: ServerBinary, datadir: Path, as_server: Callable[[], None] | None) -> None:
    basedir = binary.path.resolve().parent.parent
    search = [str(basedir / "bin"), str(basedir / "scripts"), os.environ.get("PATH", "")]
    install_db = _which_any(INSTALL_DB_NAMES, search)
    if install_db is None:
        raise ServerError(f"cannot initialise a data directory: no {' or '.join(INSTALL_DB_NAMES)} found")
    command = [
        install_db,
        "--no-defaults",
        # So the script bootstraps the same server binary we will run.
        f"--basedir={basedir}",
        f"--datadir={datadir}",
        # Not $TMPDIR, which the server's user may not write to: its own work dir.
        f"--tmpdir={datadir.parent}",
        f"--auth-root-authentication-method={ROOT_LOGIN}",
        # Only this account besides root (socket-only, for OS root) when we are not root.
        f"--auth-root-socket-user={client_name()}",
        "--skip-test-db",
        f"--innodb-log-file-size={LOG_FILE_SIZE}",
    ]
    run_command(command, Path(install_db).name, timeout=INSTALL_TIMEOUT_S, preexec=as_server, group_dies_with_us=True)


def _install_mysql(binary: ServerBinary, datadir: Path, as_server: Callable[[], None] | None) -> None:
    # Written from the MySQL 8.4 manual ("Initializing the Data Directory"); no
    # MySQL server could be installed where this was written, so it is untested.
    # --initialize-insecure makes root@localhost with an empty password, and
    # innodb_redo_log_capacity (8.0.30+) replaces innodb_log_file_size.
    command = [
        str(binary.path),
        "--no-defaults",
        "--initialize-insecure",
        f"--datadir={datadir}",
        f"--tmpdir={datadir.parent}",
        f"--innodb-redo-log-capacity={LOG_FILE_SIZE}",
    ]
    run_command(command, f"{binary.path.name} --initialize-insecure", timeout=INSTALL_TIMEOUT_S, preexec=as_server)


def _plugin_dir(binary: ServerBinary) -> str | None:
    # Asked once per template: `--verbose --help` costs about as much as a third of a start.
    if binary.flavor != "MariaDB":
        return None
    output = run_command([str(binary.path), "--no-defaults", "--verbose", "--help"], f"{binary.path.name} --help")
    match = re.search(r"^plugin-dir\s+(\S+)\s*$", output, re.MULTILINE)
    return match.group(1) if match else None


def _load_template(final: Path) -> Template:
    import json

    inode = inode_of(final)
    try:
        meta = json.loads((final / TEMPLATE_META).read_text())
        return Template(
            datadir=final / "datadir",
            log_file_size=str(meta["log_file_size"]),
            plugin_dir=meta["plugin_dir"],
            inode=inode or 0,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnusableTemplate(f"the server template {final} is broken ({exc!r})", inode) from exc


def admin_user(binary: ServerBinary) -> str:
    """The account the tool logs in to its server as: MariaDB's, by unix_socket, is named after
    our OS user; MySQL's root has no password (untested, see _install_mysql)."""
    return client_name() if binary.flavor == "MariaDB" else "root"


def server_command(binary: ServerBinary, template: Template, workdir: Path) -> list[str]:
    command = [
        str(binary.path),
        "--no-defaults",
        f"--datadir={workdir / 'data'}",
        f"--socket={workdir / SOCKET_NAME}",
        "--skip-networking",
        f"--pid-file={workdir / 'mysqld.pid'}",
        f"--log-error={workdir / ERROR_LOG_NAME}",
        # Not $TMPDIR, which may be missing or read-only (tempfile then chose another place
        # for the work dir); the run's own, removed with it.
        f"--tmpdir={workdir / 'tmp'}",
        f"--innodb-buffer-pool-size={BUFFER_POOL_SIZE}",
        # LOAD_FILE, SELECT ... INTO OUTFILE and LOAD DATA reach this directory only.
        f"--secure-file-priv={workdir / FILES_DIR}",
    ]
    if binary.flavor == "MariaDB":
        command.append(f"--innodb-log-file-size={template.log_file_size}")
        command.append("--symbolic-links=0")  # DATA/INDEX DIRECTORY ignored: no table files outside the datadir
        # information_schema.METADATA_LOCK_INFO shows who holds metadata locks;
        # MySQL has performance_schema.metadata_locks instead.
        if template.plugin_dir and (Path(template.plugin_dir) / "metadata_lock_info.so").exists():
            command.append("--plugin-load-add=metadata_lock_info")
    else:
        # The X plugin would listen on port 33060 despite --skip-networking.
        command += [f"--innodb-redo-log-capacity={template.log_file_size}", "--mysqlx=OFF"]
    return command


def wait_until_ready(process: subprocess.Popen, params: ConnectParams, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise StartFailed(
                f"the embedded server exited with code {process.returncode} while starting: "
                f"{log_summary(log_path)}"
            )
        try:
            params.connect().close()
            return
        except ServerError:
            if time.monotonic() > deadline:
                raise StartFailed(
                    f"the embedded server did not accept connections within {START_TIMEOUT_S:.0f} s: "
                    f"{log_summary(log_path)}"
                ) from None
        time.sleep(POLL_INTERVAL_S)


class EmbeddedServer(ThrowawayProcess):
    """A private, throwaway server on a unix socket, stopped and deleted on exit.

    `params` (admin_user's account, on the socket) is valid between start and stop.
    """

    def __init__(self, options: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.options = options  # after ours on the command line, so they win
        self.binary: ServerBinary | None = None

    @property
    def params(self) -> ConnectParams:
        if self.workdir is None:
            raise ServerError("the embedded server is not running")
        return ConnectParams(host="localhost", user=admin_user(self.binary), unix_socket=str(self.workdir / SOCKET_NAME))

    def start(self) -> None:
        if self.workdir is not None:
            raise ServerError("the embedded server is already running")
        binary = self.binary = find_server_binary()
        try:
            self._start_from(lambda: ensure_template(binary))
        except UnusableTemplate as exc:
            if self.options:
                # The options are the likelier cause; a template is only rebuilt when plain starts fail.
                raise StartFailed(f"{exc} (started with {' '.join(self.options)})") from None
            # A damaged cache (a truncated or overwritten file, files removed) would fail
            # every later run the same way; a fresh template is a few seconds.
            import logging  # only a damaged template is logged; a --dsn run never imports it

            logging.getLogger(__name__).warning("jobqueue-demo: %s; rebuilding the cached server template once", exc)
            inode = exc.inode
            self._start_from(lambda: rebuild_template(binary, inode))

    def _start_from(self, get_template: Callable[[], Template]) -> None:
        template = get_template()
        with self.starting("embedded server"):
            try:
                self._boot(self.binary, template)
            except StartFailed as exc:
                raise UnusableTemplate(str(exc), template.inode) from exc

    def _boot(self, binary: ServerBinary, template: Template) -> None:
        identity = server_identity()
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        # Tells a later run's sweep that this directory is in use for as long as we live.
        self._owner = hold(self.workdir)
        check_reachable(self.workdir.parent, identity)
        socket_path = self.workdir / SOCKET_NAME
        if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
            raise ServerError(f"temp dir path too long for a unix socket: {socket_path}; set a shorter TMPDIR")
        shutil.copytree(template.datadir, self.workdir / "data")
        (self.workdir / FILES_DIR).mkdir()
        (self.workdir / "tmp").mkdir()
        give(self.workdir, identity)
        log_path = self.workdir / ERROR_LOG_NAME
        command = server_command(binary, template, self.workdir) + list(self.options)
        self._process = launch(command, log_path, identity)
        wait_until_ready(self._process, self.params, log_path)
