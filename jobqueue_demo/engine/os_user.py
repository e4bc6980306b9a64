"""The OS user the throwaway servers (embedded MariaDB or MySQL, PostgreSQL, Galera nodes) run as.

Scenario SQL is untrusted, and a server's OS user is what it reaches the machine as: a
PostgreSQL superuser's `COPY ... TO PROGRAM` runs programs as that user, which peer
authentication then lets into any cluster where a role of that name exists (`postgres` into
the machine's own). So when we are root, every server runs as SERVER_USER, a system user
made only for this (no login shell, no home) that owns nothing but the run directories it
is given. As another user the servers can only run as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import ServerError

SERVER_USER = "jobqueue-demo"
NOLOGIN = "/usr/sbin/nologin"
# The home useradd records; a path that does not exist, so the user owns no directory.
NO_HOME = "/nonexistent"
SBIN_DIRS = "/usr/sbin:/sbin"
ADD_TIMEOUT_S = 30


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int


def client_name() -> str:
    """This process's OS user name: the account the tool logs in to its own servers as
    (MariaDB's unix_socket, PostgreSQL's peer authentication)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def server_identity() -> Identity | None:
    """Who the throwaway servers run as: SERVER_USER when we are root (made on first need),
    None otherwise (they run as we do)."""
    if os.geteuid() != 0:
        return None
    entry = ensure_user(SERVER_USER)
    return Identity(entry.pw_uid, entry.pw_gid)


def ensure_user(name: str) -> pwd.struct_passwd:
    """The system user `name`, made with useradd if missing (as `make install` does)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd", path=os.pathsep.join((os.environ.get("PATH", ""), SBIN_DIRS)))
    command = [useradd or "useradd", "--system", "--user-group", "--no-create-home",
               "--home-dir", NO_HOME, "--shell", NOLOGIN, name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=ADD_TIMEOUT_S)
        why = " ".join(done.stderr.split()) or f"exit {done.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        why = str(exc)
    try:
        # Also when useradd failed: another run may have made the user at the same moment.
        return pwd.getpwnam(name)
    except KeyError:
        raise ServerError(
            f"as root the throwaway servers run as the system user '{name}', which could not be made "
            f"({why}): run 'make install' or 'useradd --system --user-group --no-create-home --shell {NOLOGIN} {name}'"
        ) from None


def preexec(identity: Identity | None, arm: Callable[[], None] | None) -> Callable[[], None] | None:
    """Drop to `identity`, then `arm` (the parent-death signal: the kernel clears it when
    credentials change, so the order matters)."""
    if identity is None:
        return arm

    def run() -> None:
        os.setgroups([])
        os.setgid(identity.gid)
        os.setuid(identity.uid)
        if arm is not None:
            arm()

    return run


def give(root: Path, identity: Identity | None) -> None:
    """`root` and everything in it owned by `identity` (nothing to do when it is None)."""
    if identity is None:
        return
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), identity.uid, identity.gid)
    # Last: until now only we may enter it, so nothing in it changed while it was given away.
    os.chown(root, identity.uid, identity.gid)


def check_reachable(folder: Path, identity: Identity | None) -> None:
    """A one-line error unless `identity` may enter `folder` and every folder above it."""
    if identity is None:
        return
    for each in [folder, *folder.parents]:
        mode = each.stat()
        bit = 0o100 if mode.st_uid == identity.uid else 0o010 if mode.st_gid == identity.gid else 0o001
        if not mode.st_mode & bit:
            raise ServerError(
                f"as root the throwaway servers run as the '{SERVER_USER}' user, which cannot enter "
                f"{folder}: point TMPDIR at a directory it can enter, such as /tmp"
            )
