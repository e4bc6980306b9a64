"""What every throwaway server shares, whatever its engine: a process of its own in a run
directory of its own, started as the tool's server user, dying with us, stopped and removed
however the run ends; the cache its templates live in, and their locks."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from ..errors import ServerError
from .deadlines import uninterrupted
from .os_user import Identity, preexec
from .shm import release_segment

CACHE_DIR_NAME = "jobqueue-demo"


WORKDIR_PREFIX = "jobqueue-demo-"


STOP_TIMEOUT_S = 10.0


PR_SET_PDEATHSIG = 1


# A parent-death signal reaches only the process it is set on, not the subshells and the
# bootstrap server mariadb-install-db starts: this shell, in their process group, kills the
# group whole when it gets SIGTERM, the parent-death signal it is given (kill -9 of the run).
GROUP_GUARD = ["/bin/sh", "-c", 'trap "kill -KILL 0" TERM; "$@" & wait $!', "sh"]


def run_command(
    command: list[str], what: str, timeout: float = 30, preexec: Callable[[], None] | None = None,
    group_dies_with_us: bool = False,
) -> str:
    # A process group of its own, killed whole on any exit from here (Ctrl-C, SIGTERM, a
    # timeout): mariadb-install-db is a script whose bootstrap server would outlive it.
    if group_dies_with_us:
        # After `preexec` (the server's user): a change of credentials clears the signal.
        command, preexec = GROUP_GUARD + command, in_turn(preexec, die_with_parent(signal.SIGTERM))
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=preexec,
        )
    except OSError as exc:
        raise ServerError(f"{what} failed: {exc}") from exc
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ServerError(f"{what} failed: {exc}") from exc
    finally:
        _kill_group(process)
    if process.returncode != 0:
        raise ServerError(f"{what} failed (exit {process.returncode}): {summary(stdout + stderr)}")
    return stdout


def in_turn(*steps: Callable[[], None] | None) -> Callable[[], None] | None:
    """One preexec_fn running `steps` in order (None where there are none)."""
    taken = [step for step in steps if step is not None]
    if not taken:
        return None

    def run() -> None:
        for step in taken:
            step()

    return run


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


_LOG_PREFIX = re.compile(r"^.*?(?=\[(?:ERROR|Warning|Note|System)\])")


def summary(text: str, lines: int = 3) -> str:
    """A server's output as one line: its first errors, else its last lines.

    The first errors name the cause; the last ones are consequences ("Aborting").
    """
    nonblank = [_LOG_PREFIX.sub("", line).strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in nonblank if line.startswith("[ERROR]") and "Aborting" not in line]
    picked = errors[:lines] if errors else nonblank[-lines:]
    return " | ".join(picked) or "(no output)"


def cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says to ignore a relative XDG_CACHE_HOME.
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / CACHE_DIR_NAME


def inode_of(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def discard(final: Path) -> None:
    # Renamed first: a process starting now finds no template rather than half of one.
    if final.exists():
        aside = Path(tempfile.mkdtemp(prefix=f"{final.name}.broken-", dir=final.parent))
        os.rename(final, aside / "template")
        shutil.rmtree(aside)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A preexec_fn making the server get `signum` (SIGKILL) when we die, even by SIGKILL.

    Linux only. The signal follows the *thread* that started the server, so
    start it from a thread that lives as long as the server is needed.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signum)
        # We may have died between fork and prctl; then nobody would ever stop the server.
        if os.getppid() != parent:
            os._exit(1)

    return arm


def launch(command: list[str], log_path: Path, identity: Identity | None) -> subprocess.Popen:
    """The server started as `identity` (server_identity()) in a session of its own."""
    with open(log_path, "ab") as log:
        # Messages written before --log-error takes effect go to the same file.
        # A session of its own keeps the terminal's Ctrl-C and Ctrl-Z away from
        # the server; we stop it ourselves, in order.
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=preexec(identity, die_with_parent()),
        )


def log_summary(path: Path) -> str:
    """A server's log file as one line (see summary)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        text = ""
    return summary(text)


def terminate(process: subprocess.Popen) -> None:
    # The datadir is thrown away, so there is nothing to shut down cleanly for: SIGKILL
    # saves the ~60 ms InnoDB spends flushing on SIGTERM.
    try:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT_S)
    finally:
        # Also reached on Ctrl-C during the wait: never leave it running.
        if process.poll() is None:
            process.kill()
            process.wait()


class Throwaway:
    """Started by a with-block and stopped at its end, however it ends; at the interpreter's
    exit too, for one started without a with-block or whose block never exits (an
    open_server generator still suspended when the interpreter ends)."""

    # Every one started and not yet stopped: the embedded servers, PostgreSQL's and the clusters.
    alive: set[Throwaway] = set()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def starting(self, what: str) -> Iterator[None]:
        """Kept for the exit-time stop from here on; whatever a failed start left running
        stopped and removed, and an OSError (no room for the copy, a missing binary) told as
        `cannot start the <what>`."""
        Throwaway.alive.add(self)
        try:
            yield
        except OSError as exc:
            self.stop()
            raise ServerError(f"cannot start the {what}: {os_error_line(exc)}") from exc
        except BaseException:
            self.stop()
            raise

    def stopping(self) -> None:
        """Called first by every stop: no longer kept for the exit-time stop."""
        Throwaway.alive.discard(self)

    @staticmethod
    def stop_all() -> None:
        """At the interpreter's exit too: a stop signal then waits for every server to stop,
        and changes nothing after it, since the process is ending anyway."""
        with contextlib.suppress(KeyboardInterrupt), uninterrupted():
            for left in list(Throwaway.alive):
                left.stop()


# An OSError's own text can be huge: shutil.copytree's lists every file that failed, each
# with both paths (a full disk: 74 KB for MariaDB's template, 245 KB for PostgreSQL's).
OS_ERROR_MAX_CHARS = 300


def os_error_line(exc: OSError) -> str:
    """One short line for an OSError: for a failed copy, its first failure and how many more."""
    failures = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(failures, list) and failures and len(failures[0]) == 3:
        source, target, why = failures[0]
        reason = str(why).split(": '", 1)[0]  # "[Errno 28] No space left on device", without the paths
        more = f" (and {len(failures) - 1} more file(s))" if len(failures) > 1 else ""
        text = f"copying {source} to {target}: {reason}{more}"
    else:
        text = " ".join(str(exc).split())
    return text if len(text) <= OS_ERROR_MAX_CHARS else text[: OS_ERROR_MAX_CHARS - 1] + "…"


def remove_workdir(workdir: Path | None, owner) -> None:
    """A run's directory gone, then its owner marker released (see owner.py)."""
    if workdir is not None:
        release_segment(workdir / "data")  # a killed PostgreSQL's; nothing for MariaDB
        shutil.rmtree(workdir, ignore_errors=True)
    if owner is not None:
        owner.close()


class ThrowawayProcess(Throwaway):
    """One server process in a run directory of its own: the embedded MariaDB or MySQL server,
    and PostgreSQL's (engine/postgresql/embedded.py)."""

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self._process: subprocess.Popen | None = None
        self._owner = None

    def end(self, process: subprocess.Popen) -> None:
        terminate(process)

    @uninterrupted()
    def stop(self) -> None:
        process, workdir = self._process, self.workdir
        self._process = self.workdir = None
        self.stopping()
        try:
            if process is not None:
                self.end(process)
        finally:
            owner, self._owner = self._owner, None
            remove_workdir(workdir, owner)


atexit.register(Throwaway.stop_all)
