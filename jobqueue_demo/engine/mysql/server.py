"""How to reach a MariaDB or MySQL server: its DSN read, its connections opened with every
wait bounded, and what it says it is.

The throwaway ("embedded") server lives in embedded.py, which a run on a DSN never imports.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from types import EllipsisType
from typing import TYPE_CHECKING
from urllib.parse import unquote

from ...errors import ServerError, UsageError
from ..dsn import ANSWER_TIMEOUT_S, CONNECT_TIMEOUT_S, refuse_nul, scheme_of, split_dsn
from . import DSN_FORM, SCHEMES, TITLE

if TYPE_CHECKING:
    from MySQLdb.connections import Connection

DEFAULT_PORT = 3306
DEFAULT_USER = "root"
MAX_SOCKET_TIMEOUT_S = 86400
# A --step or --pace pause may be long, and a server's global wait_timeout short: the
# server default (8 hours) for every connection, so an idle control connection is kept.
SESSION_WAIT_TIMEOUT_S = 28800


def keeping_no_dir(mode: str) -> str:
    """The assignment of the sql_mode `mode` (an SQL expression) with NO_DIR_IN_CREATE added.
    A server that honours DATA/INDEX DIRECTORY (a --dsn one; the embedded one runs with
    --symbolic-links=0) then ignores them, PREPAREd text included, so scenario SQL, which may
    not name sql_mode (scenario/sql_guard.py), does not choose where a table's files go."""
    return f"sql_mode = CONCAT_WS(',', NULLIF({mode}, ''), 'NO_DIR_IN_CREATE')"


# Every connection's first statement, again after COM_CHANGE_USER (which resets the session).
SESSION_INIT = f"SET SESSION wait_timeout = {SESSION_WAIT_TIMEOUT_S}, " + keeping_no_dir("@@SESSION.sql_mode")
CLIENT_OPTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "client.cnf")


@dataclass
class ConnectParams:
    """Where and as whom to connect to a MariaDB or MySQL server, as a DSN names it."""

    host: str
    port: int = DEFAULT_PORT
    user: str = DEFAULT_USER
    password: str = field(default="", repr=False)
    database: str | None = None
    unix_socket: str | None = None

    def display(self) -> str:
        """Where this connects, in DSN form, for messages; the password is never shown."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"{self.user}@{host}" if self.unix_socket else f"{self.user}@{host}:{self.port}"
        if self.database:
            text += f"/{self.database}"
        if self.unix_socket:
            text += f"?unix_socket={self.unix_socket}"
        return text

    def connect(
        self,
        database: str | None | EllipsisType = ...,
        multi_statements: bool = False,
        answer_timeout: float = ANSWER_TIMEOUT_S,
    ) -> Connection:
        """An open MySQLdb connection; `database` overrides the DSN's (None: no default database).

        No call on it waits longer than `answer_timeout` seconds for the server (see bounded.py).
        """
        import MySQLdb

        from .bounded import open_connection

        target = self if database is ... else replace(self, database=database)
        options = {
            "host": target.host,
            "port": target.port,
            "user": target.user,
            "password": target.password,
            "autocommit": True,
            # Without converters values stay in the server's text form, so what a
            # lesson shows is exactly what the server sent.
            "conv": {},
            "charset": "utf8mb4",
            # A server that stops answering ends the run one answer timeout after it fell
            # silent, also when what it does not answer is a new connection (explore's reconnect).
            "connect_timeout": min(CONNECT_TIMEOUT_S, _whole_seconds(answer_timeout)),
            # Whole seconds, at least one: they bound the reads after an answer has begun.
            "read_timeout": _whole_seconds(answer_timeout),
            "write_timeout": _whole_seconds(answer_timeout),
            "init_command": SESSION_INIT,
            # mysqlclient turns multi-statements on unless told otherwise.
            "multi_statements": multi_statements,
            # LOAD DATA LOCAL would let scenario SQL ask this client for any file it can read.
            "local_infile": 0,
            # Its max_allowed_packet: a row a server sends can be far bigger than the server's own.
            "read_default_file": CLIENT_OPTIONS,
        }
        if target.database is not None:
            options["database"] = target.database
        if target.unix_socket is not None:
            options["unix_socket"] = target.unix_socket
        try:
            conn = open_connection(options)
        except MySQLdb.Error as exc:
            raise ServerError(f"cannot connect to {target.display()}: {_error_text(exc)}") from exc
        conn.answer_timeout = answer_timeout
        return conn


def _whole_seconds(seconds: float) -> int:
    """A socket timeout for libmariadb: whole seconds, at least one, nan and inf capped."""
    if not seconds < MAX_SOCKET_TIMEOUT_S:
        return MAX_SOCKET_TIMEOUT_S
    return max(1, math.ceil(seconds))


def _error_text(exc: Exception) -> str:
    # MySQLdb errors carry (errno, message); the message alone reads like the mysql client's.
    text = str(exc.args[-1]) if exc.args else str(exc)
    return " ".join(text.split())


def parse_dsn(dsn: str) -> ConnectParams:
    """Read mysql://user:password@host:port/database[?unix_socket=/path] (or mariadb://).

    Error messages never quote the DSN, since it may hold a password.
    """
    dsn = dsn.strip()
    if scheme_of(dsn) not in SCHEMES:
        raise UsageError(f"not a {TITLE} DSN: expected {DSN_FORM} (or mariadb://...)")
    parts, port = split_dsn(dsn, DSN_FORM)
    unix_socket = _dsn_unix_socket(parts.query)
    # The client library would silently take TCP to the host and ignore the socket.
    if unix_socket and (parts.hostname not in (None, "localhost") or port is not None):
        raise UsageError(
            "the DSN names a TCP host or port and ?unix_socket=: use one, "
            "e.g. mysql://user@localhost/db?unix_socket=/path"
        )
    host = parts.hostname or ("localhost" if unix_socket else None)
    if host is None:
        raise UsageError(f"the DSN names no host: expected {DSN_FORM} or ...?unix_socket=/path")
    params = ConnectParams(
        host=host,
        port=port or DEFAULT_PORT,
        user=unquote(parts.username) if parts.username else DEFAULT_USER,
        password=unquote(parts.password or ""),
        database=_dsn_database(parts.path),
        unix_socket=unix_socket,
    )
    refuse_nul(params.host, params.user, params.password, params.database, unix_socket)
    return params


def _dsn_database(path: str) -> str | None:
    name = path[1:]
    if "/" in name:
        raise UsageError("the DSN's path must be a single database name")
    return unquote(name) or None


def _dsn_unix_socket(query: str) -> str | None:
    unix_socket = None
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        # Plain unquote, not parse_qs: a '+' in a socket path is a plus, not a space.
        if unquote(key) != "unix_socket" or unix_socket is not None or not value:
            raise UsageError("the DSN's only option is one ?unix_socket=/path")
        unix_socket = unquote(value)
    return unix_socket


_MARIADB_VERSION = re.compile(r"(\d+\.\d+\.\d+)-MariaDB", re.IGNORECASE)
_PLAIN_VERSION = re.compile(r"\d+\.\d+\.\d+")


def parse_version(text: str) -> tuple[str, str]:
    """('MariaDB', '10.11.19') from '10.11.19-MariaDB-0+deb12u1'; ('MySQL', '8.4.3') from '8.4.3'.

    Also reads `mysqld --version` output.
    """
    # Searching for the number before "-MariaDB" skips the "5.5.5-" prefix some
    # MariaDB builds report for old replication clients.
    mariadb = _MARIADB_VERSION.search(text)
    if mariadb:
        return "MariaDB", mariadb.group(1)
    plain = _PLAIN_VERSION.search(text)
    if plain:
        return "MySQL", plain.group(0)
    raise ServerError(f"unrecognised server version {text.strip()!r}")


def describe_server(conn: Connection) -> tuple[str, str]:
    """(flavor, version) of the server behind an open connection."""
    cursor = conn.cursor()
    try:
        cursor.execute("SELECT VERSION()")
        (text,) = cursor.fetchone()
    finally:
        cursor.close()
    return parse_version(text.decode() if isinstance(text, bytes) else text)
