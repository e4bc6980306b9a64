"""How the tool names what it makes on a server (scratch databases, per-run users and roles),
the same on every engine, so that a sweep can tell a dead run's leftovers from anyone else's."""

from __future__ import annotations

import os
import re

PREFIX = "jqd_"
# Older versions named their databases jqd_ and 10 hex digits, without a named lock: nothing
# proves such a database's run is gone, so the sweep matches the longer names only. Matched
# with fullmatch: `$` also matches before a final newline, and `jqd_<16 hex>\n` is a name
# PostgreSQL (a database) and MariaDB (a user) take, somebody else's.
NAME_HEX = 16
RUN_NAME = re.compile(rf"{PREFIX}[0-9a-f]{{{NAME_HEX}}}")
SNAPSHOT_SUFFIX = "_s"
# The per-run user's connections at once, so that no scenario can take a shared server's: its
# sessions (scenario/loader.py's MAX_SESSIONS, 16), the setup's connection, and as many again
# for connections the server has not yet seen closed (explore's restarts, a dropped socket
# whose statement still waits for a lock).
USER_CONNECTIONS = 34
SHARED_USER_OPTION = "--allow-shared-user"


def new_name() -> str:
    return PREFIX + os.urandom(NAME_HEX // 2).hex()
