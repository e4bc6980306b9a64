"""Replacing a user's file without surprises: whole or not at all, through a symlink to
its target, keeping its mode, and never over something that is not a regular file.

Export (-o) and record both write here. The new text goes to a uniquely named temporary
file beside the target, so a reader never sees half a file, and a file the user happens
to have named `<target>.tmp` is left alone.
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
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"{path}: is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(f"{path}: not a regular file (a device, FIFO or socket); refusing to replace it")
    folder = os.path.dirname(real)
    if not os.path.isdir(folder):
        raise UsageError(f"{path}: no such directory {folder}")
    if not os.access(folder, os.W_OK) or (mode is not None and not os.access(real, os.W_OK)):
        raise UsageError(f"{path}: not writable")
    return real


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
