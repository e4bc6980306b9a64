"""A run's scratch database on a (possibly shared) server, and the control connection that owns it.

What makes it safe on a server other people use:

- Ownership: the control connection holds the named lock GET_LOCK('<name>') for the whole run,
  taken before anything is created. A database or user of this name pattern whose lock is free
  belongs to a run that is gone (the server frees a client's locks when it disconnects, however
  it died), so the next run's sweep (leftovers.py) may drop it.
- Confinement: scenario SQL runs as a per-run user `<name>`@`<our host>` that holds privileges
  on the scratch database only, so a statement reaching outside it fails on the server (ERROR
  1044, 1142, 1227...) as a result in the transcript. The control connection keeps the DSN's
  user, which the tool's own SQL needs (lock waits need PROCESS, KILL of the sessions).
- A bounded drop: DROP DATABASE waits for metadata locks other clients hold on its tables; a
  short session lock_wait_timeout turns an endless wait into one line naming the holder.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from ...errors import ServerError
from ..deadlines import uninterrupted
from ..dsn import ANSWER_TIMEOUT_S
from ..naming import SHARED_USER_OPTION, USER_CONNECTIONS, new_name
from ..types import ControlError, ServerInfo, first_failure
from . import control
from .errors import ER_LOCK_WAIT_TIMEOUT, LOST_CONNECTION
from .server import ConnectParams
from .waits import CLIENT_THREAD

DROP_LOCK_WAIT_S = 3


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def grant_pattern(database: str) -> str:
    """The database as a GRANT names it: '_' and '%' are wildcards there, so escape them."""
    return quote(database.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%"))


class ScratchDatabase:
    """Open with `open()`, always end with `close()`: everything made is dropped, once, bounded.

    `confine` makes the per-run user; without it sessions connect as the DSN's user (the
    workers, whose SQL is the tool's own, and runs with --allow-shared-user).
    """

    def __init__(
        self,
        server: ServerInfo,
        confine: bool = True,
        multi_statements: bool = False,
        answer_timeout: float = ANSWER_TIMEOUT_S,
    ):
        self.server = server
        self.answer_timeout = answer_timeout
        self.name = new_name()
        self.confine = confine
        self.multi_statements = multi_statements
        self.conn = None
        self.session_params: ConnectParams = server.params
        self._user: str | None = None
        self._databases: list[str] = []

    def open(self) -> None:
        self.conn = self.server.params.connect(
            database=None, multi_statements=self.multi_statements, answer_timeout=self.answer_timeout
        )
        try:
            self.execute(f"SET SESSION lock_wait_timeout = {DROP_LOCK_WAIT_S}")
            if not control.flag(self.conn, f"SELECT GET_LOCK({literal(self.name)}, 0)"):
                raise ServerError(f"cannot take the named lock {self.name} on {self.server.where}")
            if self.confine:
                self._create_user()
            self.create_database(self.name)
            self.execute(f"USE {quote(self.name)}")
        except BaseException:
            self.close(quiet=True)
            raise

    def _create_user(self) -> None:
        host = (control.value(self.conn, "SELECT USER()") or "").rpartition("@")[2] or "localhost"
        password = os.urandom(16).hex()  # what secrets.token_hex does; secrets costs 4 ms of start-up
        account = f"{literal(self.name)}@{literal(host)}"
        try:
            self.execute(f"CREATE USER {account} IDENTIFIED BY {literal(password)} WITH MAX_USER_CONNECTIONS {USER_CONNECTIONS}")
            self._user = account
            self.execute(f"GRANT ALL PRIVILEGES ON {grant_pattern(self.name)}.* TO {account}")
        except ControlError as e:
            if e.errno not in control.PRIVILEGE_ERRORS:
                raise
            raise ServerError(
                f"{self.server.params.user} may not create the per-run user that confines scenario SQL to its "
                f"scratch database (ERROR {e.errno}); grant it CREATE USER and GRANT OPTION, or run with "
                f"'jobqueue-demo {SHARED_USER_OPTION} ...' (scenario SQL then runs as {self.server.params.user})"
            ) from None
        self.session_params = replace(self.server.params, user=self.name, password=password, database=self.name)

    def create_database(self, name: str) -> None:
        """A database this run owns; dropped by close(), or by a later sweep if the run dies."""
        self.execute(f"CREATE DATABASE {quote(name)}")
        self._databases.append(name)

    def let_user_read(self, database: str) -> None:
        """The per-run user may read one of the run's other databases (not write it)."""
        if self._user is not None:
            self.execute(f"GRANT SELECT ON {grant_pattern(database)}.* TO {self._user}")

    def recreate(self) -> None:
        self.execute(f"DROP DATABASE {quote(self.name)}")
        self.execute(f"CREATE DATABASE {quote(self.name)}")
        self.execute(f"USE {quote(self.name)}")

    def execute(self, sql: str) -> None:
        control.execute(self.conn, sql)

    def rows(self, sql: str) -> tuple:
        return control.rows(self.conn, sql)

    def let_role_set(self, parameters: tuple[str, ...]) -> None:
        """Isolation specs, which set such settings, are PostgreSQL's: none reaches MySQL."""
        if parameters:
            raise ServerError(f"no MySQL setting is granted to the per-run user: {', '.join(parameters)}")

    def drop(self, name: str) -> None:
        """Drop one of this run's databases, waiting at most DROP_LOCK_WAIT_S for other clients."""
        drop_bounded(self.conn, name)
        if name in self._databases:
            self._databases.remove(name)

    def _drop_all(self) -> ControlError | None:
        """Drop every database made, then the user; the first failure, if any."""
        drops = [lambda name=name: self.drop(name) for name in reversed(self._databases)]
        if self._user is not None:
            drops.append(lambda: self.execute(f"DROP USER IF EXISTS {self._user}"))
        return first_failure(drops, LOST_CONNECTION)

    @uninterrupted()
    def close(self, quiet: bool = False) -> None:
        """Drop what was made and disconnect, which frees the named lock for a later sweep
        whatever failed. `quiet` (already failing): the first error stays the one raised, and
        what could not be dropped becomes a note on it."""
        if self.conn is None:
            return
        try:
            failure = self._drop_all()
        finally:
            try:
                self.conn.close()
            except Exception:  # the server may already be gone; nothing more to release
                pass
            self.conn = None
        if failure is None:
            return
        if not quiet:
            raise failure
        if failure.errno in LOST_CONNECTION:
            return  # the error already raised says the server is gone
        handling = sys.exc_info()[1]
        if isinstance(handling, GeneratorExit):  # a run closed by its consumer: note the consumer's error
            handling = handling.__context__
        if handling is not None:
            handling.add_note(str(failure))


def drop_bounded(conn, name: str) -> None:
    """DROP DATABASE on a connection whose session lock_wait_timeout is DROP_LOCK_WAIT_S; a
    timeout names who holds it."""
    import MySQLdb

    from .bounded import server_bounded

    sql = f"DROP DATABASE IF EXISTS {quote(name)}"
    try:
        with server_bounded(conn, DROP_LOCK_WAIT_S):
            conn.query(sql.encode())
        conn.store_result()
    except MySQLdb.Error as exc:
        if control.errno_of(exc) != ER_LOCK_WAIT_TIMEOUT:
            raise control.control_error(exc, sql) from None
        raise ControlError(
            f"could not drop {name} within {DROP_LOCK_WAIT_S} s: {holders(conn, name)}; "
            "the next run on this server (or 'jobqueue-demo cleanup') drops it",
            ER_LOCK_WAIT_TIMEOUT,
        ) from None


def holders(conn, database: str) -> str:
    """Which connections hold the database's tables open, as 'connection ID (user@host)'."""
    me = int(conn.thread_id())
    exact = [i for i in _metadata_holders(conn, database) + _using(conn, database) if i != me]
    if exact:
        return "held by " + _described(conn, exact)
    # Without a metadata lock table only a transaction left open can be pointed at.
    found = control.rows(conn, "SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX")
    open_trx = [int(r[0]) for r in found if int(r[0]) != me]
    if not open_trx:
        return "held by another connection the server does not name"
    return "the server does not name the holder; connections with an open transaction: " + _described(conn, open_trx)


def _described(conn, ids: list[int]) -> str:
    listed = ", ".join(str(i) for i in sorted(set(ids)))
    found = control.rows(conn, f"SELECT ID, USER, HOST FROM information_schema.PROCESSLIST WHERE ID IN ({listed})")
    named = [f"connection {int(i)} ({control.text(u)}@{control.text(h)})" for i, u, h in found]
    return ", ".join(named or [f"connection {i}" for i in sorted(set(ids))])


def _metadata_holders(conn, database: str) -> list[int]:
    """Granted metadata locks: MySQL's performance_schema, or MariaDB's metadata_lock_info plugin."""
    import MySQLdb

    for sql in (
        "SELECT DISTINCT THREAD_ID FROM information_schema.METADATA_LOCK_INFO "
        f"WHERE TABLE_SCHEMA = {literal(database)} AND {CLIENT_THREAD}",
        "SELECT DISTINCT t.PROCESSLIST_ID FROM performance_schema.metadata_locks m "
        "JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID "
        f"WHERE m.OBJECT_SCHEMA = {literal(database)} AND m.LOCK_STATUS = 'GRANTED'",
    ):
        try:
            conn.query(sql.encode())
            return [int(r[0]) for r in conn.store_result().fetch_row(0) if r[0] is not None]
        except MySQLdb.Error:
            continue  # this server has the other table, or neither
    return []


def _using(conn, database: str) -> list[int]:
    """Without a metadata lock table, the connections whose default database it is."""
    found = control.rows(conn, f"SELECT ID FROM information_schema.PROCESSLIST WHERE DB = {literal(database)}")
    return [int(r[0]) for r in found]
