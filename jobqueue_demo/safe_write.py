"""Replacing a user's file without surprises: whole or not at all, through a symlink to
its target, keeping its mode, and never over something that is not a regular file.

Export (-o) and record both write here. The new text goes to a uniquely named temporary
file beside the target, so a reader never sees half a file, and a file the user happens
to have named `<target>.tmp` is left alone.

Another local user may have prepared the path: in a sticky world-writable directory (/tmp)
a symlink or a file of theirs is refused as the kernel's fs.protected_symlinks and
fs.protected_regular refuse them, whatever those sysctls say on this machine (the path is
resolved here, in user space, where the kernel would not check); and nothing is created
among devices or the kernel's files (/dev, /proc, /sys).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

from .errors import UsageError


def check_writable(path: str) -> str:
    """The file to write for `path` (a symlink's target), refused early when it cannot be
    written or is not a regular file (a directory, device, FIFO or socket)."""
    real = _resolve(path)
    try:
        found = os.stat(real)
    except FileNotFoundError:
        found = None
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror}") from None
    mode = found.st_mode if found else None
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"{path}: is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(f"{path}: not a regular file (a device, FIFO or socket); refusing to replace it")
    folder = os.path.dirname(real)
    if not os.path.isdir(folder):
        raise UsageError(f"{path}: no such directory {folder}")
    system = _system_tree(folder)
    if system is not None:
        raise UsageError(f"{path}: {system} holds devices and the kernel's files; refusing to create a file there")
    if found is not None and _foreign_in_shared(found, os.stat(folder)):
        raise UsageError(f"{path}: {real} belongs to another user (uid {found.st_uid}) in the shared directory {folder}; refusing to replace it")
    if not os.access(folder, os.W_OK) or (mode is not None and not os.access(real, os.W_OK)):
        raise UsageError(f"{path}: not writable")
    return real


SYMLINK_HOPS = 40  # the kernel's limit (ELOOP)
SYSTEM_TREES = ("/dev", "/proc", "/sys")


def _resolve(path: str) -> str:
    """`path` with every symlink resolved, as realpath does, but following a link only where
    the kernel's fs.protected_symlinks would."""
    pending = path.split("/")[::-1]
    current = "/" if path.startswith("/") else os.getcwd()
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)  # `current` holds no symlink, so this is its parent
            continue
        candidate = os.path.join(current, part)
        try:
            link = os.lstat(candidate)
        except OSError:
            link = None
        if link is None or not stat.S_ISLNK(link.st_mode):
            current = candidate
            continue
        if _foreign_in_shared(link, os.stat(current)):
            raise UsageError(
                f"{path}: {candidate} is a symbolic link another user (uid {link.st_uid}) made in the shared "
                f"directory {current}; refusing to follow it"
            )
        hops += 1
        if hops > SYMLINK_HOPS:
            raise UsageError(f"{path}: too many levels of symbolic links")
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = "/"
        pending.extend(target.split("/")[::-1])
    return current


def _foreign_in_shared(entry: os.stat_result, folder: os.stat_result) -> bool:
    """The kernel's rule for a symlink (protected_symlinks) and for a file opened to be
    created (protected_regular) in a sticky world-writable directory: refused unless its
    owner is us or the directory's owner."""
    shared = folder.st_mode & (stat.S_ISVTX | stat.S_IWOTH) == stat.S_ISVTX | stat.S_IWOTH
    return shared and entry.st_uid not in (os.geteuid(), folder.st_uid)


def _system_tree(folder: str) -> str | None:
    """The tree of devices or kernel files `folder` is in (/dev/shm, a file system of its own, is not)."""
    for tree in SYSTEM_TREES:
        if folder == tree or folder.startswith(tree + "/"):
            with contextlib.suppress(OSError):
                if os.stat(folder).st_dev == os.stat(tree).st_dev:
                    return tree
    return None


def write_file(path: str, text: str) -> None:
    """Replace `path` with `text` atomically, keeping the file's mode (and owner, where allowed)."""
    real = check_writable(path)
    try:
        old = os.stat(real)
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.", suffix=".tmp", dir=os.path.dirname(real))
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, stat.S_IMODE(old.st_mode) if old else _new_file_mode())
        if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
            # Only root may give a file away; anyone else keeps the file as theirs.
            with contextlib.suppress(PermissionError):
                os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, real)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise UsageError(f"{path}: cannot write: {e.strerror}") from None
        raise


def _new_file_mode() -> int:
    # mkstemp makes 0600; a new file should get what open() would give it: 0666 less the umask.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
