"""How to reach a PostgreSQL server: its DSN read, its connections opened with every wait
bounded, and the version it reports. The throwaway cluster lives in embedded.py, which a
run on a DSN never imports."""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field, replace
from types import EllipsisType
from urllib.parse import unquote

from ...errors import ServerError, UsageError
from ..dsn import ANSWER_TIMEOUT_S, refuse_nul, scheme_of, split_dsn
from ..os_user import client_name
from . import DSN_FORM, SCHEMES

DEFAULT_PORT = 5432
CONNECT_TIMEOUT_S = 5
SUPERUSER = "postgres"
APPLICATION = "jobqueue-demo"  # application_name; a run's admin connection adds its name (scratch.py)


@dataclass(frozen=True)
class PgParams:
    """Where a PostgreSQL server is: TCP host and port, or a Unix socket directory (`socket_dir`)."""

    host: str
    port: int = DEFAULT_PORT
    user: str = SUPERUSER
    password: str = field(default="", repr=False)
    database: str | None = None
    socket_dir: str | None = None

    def display(self) -> str:
        """Where this connects, in DSN form, for messages; the password is never shown."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"{self.user}@{host}:{self.port}" if not self.socket_dir else f"{self.user}@"
        text += f"/{self.database}" if self.database else ""
        if self.socket_dir:
            text += f"?host={self.socket_dir}"
        return text

    def conninfo(self, database: str | None | EllipsisType = ..., application: str = APPLICATION,
                 answer_timeout: float = ANSWER_TIMEOUT_S) -> dict[str, str | int]:
        """libpq's keywords; `database` overrides the DSN's (None: the server's default)."""
        target = self if database is ... else replace(self, database=database)
        options: dict[str, str | int] = {
            "host": target.socket_dir or target.host,
            "port": target.port,
            "user": target.user,
            # A server that stops answering ends the run one answer timeout after it fell
            # silent, also when what it does not answer is a new connection (explore's
            # reconnect); libpq takes whole seconds, at least 2.
            "connect_timeout": max(2, math.ceil(min(CONNECT_TIMEOUT_S, answer_timeout))),
            "application_name": application,
        }
        if target.password:
            options["password"] = target.password
        if target.database:
            options["dbname"] = target.database
        return options

    def connect(
        self, database: str | None | EllipsisType = ..., answer_timeout: float = ANSWER_TIMEOUT_S,
        application: str = APPLICATION, catalog_names_only: bool = False,
    ):
        """An open connection (libpq.Connection; libpq is always in autocommit: every BEGIN is
        explicit). The tool's own statements on it wait at most `answer_timeout` seconds for the
        server (control.py). `catalog_names_only`: an empty search_path from the start (scratch.py
        says why), and row_security off, so a policy of the scenario's is an error there, never
        run (pg_dump's)."""
        from .libpq import Connection, LibpqError, PGconn, conninfo

        if catalog_names_only and database is ...:
            spare = _SPARE.pop(self, None)
            if spare is not None and _reusable(spare):
                return _as(spare, application, answer_timeout)
        options = self.conninfo(database, application, answer_timeout)
        if catalog_names_only:
            options["options"] = "-c search_path= -c row_security=off"
        try:
            return Connection(PGconn.connect(conninfo(options), float(options["connect_timeout"])), answer_timeout)
        except LibpqError as exc:
            target = self if database is ... else replace(self, database=database)
            raise ServerError(f"cannot connect to {target.display()}: {_one_line(exc)}") from None


# The DSN's connection the server's description opened, for the next to ask for the same (the
# sweep, then the run's admin connection): each new one is a backend for the server to start,
# 3-20 ms, and a run's first three all go to the DSN's database as the DSN's user.
_SPARE: dict[PgParams, object] = {}


def keep_spare(params: PgParams, conn) -> None:
    """Keep `conn` (a catalog_names_only connection to the DSN's database) for the next
    connect() of `params` that asks for one; the one kept before is closed."""
    old = _SPARE.pop(params, None)
    if old is not None:
        with contextlib.suppress(Exception):
            old.close()
    if _reusable(conn):
        _SPARE[params] = conn
    else:
        conn.close()


def _reusable(conn) -> bool:
    """Open, idle, and with nothing unread: a server that ended it (a restart, a terminate)
    has sent it a last message."""
    import select

    from .libpq import TRANS_IDLE

    pgconn = conn.pgconn
    if conn.closed or conn.dropped or pgconn.transaction_status != TRANS_IDLE:
        return False
    return not select.select([pgconn.socket], [], [], 0)[0]


def _as(conn, application: str, answer_timeout: float):
    """A spare connection, named as asked: a run's admin connection is known by its name."""
    from . import control

    conn.answer_timeout = answer_timeout
    if conn.pgconn.parameter_status(b"application_name") != application.encode():
        control.execute(conn, f"SET application_name = {control.literal(application)}")
    return conn


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def parse_dsn(dsn: str) -> PgParams:
    """Read postgresql://user:password@host:port/database[?host=/socket/dir] (or postgres://).

    Error messages never quote the DSN, since it may hold a password.
    """
    dsn = dsn.strip()
    if scheme_of(dsn) not in SCHEMES:
        raise UsageError(f"not a PostgreSQL DSN: expected {DSN_FORM} (or postgres://...)")
    parts, port = split_dsn(dsn, DSN_FORM)
    socket_dir = _socket_dir(parts.query)
    if socket_dir is None and not parts.hostname:
        raise UsageError(f"the DSN names no host: expected {DSN_FORM} or ...?host=/socket/dir")
    database = unquote(parts.path[1:])
    if "/" in database:
        raise UsageError("the DSN's path must be a single database name")
    user = unquote(parts.username) if parts.username else client_name()
    params = PgParams(
        host=parts.hostname or "localhost",
        port=port or DEFAULT_PORT,
        user=user,
        password=unquote(parts.password or ""),
        database=database or None,
        socket_dir=socket_dir,
    )
    refuse_nul(params.host, params.user, params.password, params.database, socket_dir)
    return params


def _socket_dir(query: str) -> str | None:
    found = None
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        value = unquote(value)
        if unquote(key) != "host" or found is not None or not value.startswith("/"):
            raise UsageError("the DSN's only option is one ?host=/socket/dir (an absolute directory)")
        found = value
    return found


_VERSION = re.compile(r"\d+(?:\.\d+)+")


def parse_version(text: str) -> str:
    """'15.20' from '15.20 (Debian 15.20-0+deb12u1)' or 'postgres (PostgreSQL) 15.20 ...'."""
    found = _VERSION.search(text)
    if not found:
        raise ServerError(f"unrecognised PostgreSQL version {text.strip()!r}")
    return found.group(0)


def describe_server(params: PgParams) -> str:
    """The version of the server `params` reach."""
    conn = params.connect(catalog_names_only=True)
    try:
        version = parse_version(conn.pgconn.parameter_status(b"server_version").decode())
    except BaseException:
        conn.close()
        raise
    keep_spare(params, conn)
    return version


# --- the embedded cluster ---------------------------------------------------------

