"""MariaDB and MySQL behind the seam (seam.py's Engine).

Each method imports its module where it is called, so a run pays only for what it uses: a run
on a DSN never imports embedded.py, one that never waits never imports waits.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

from ..dsn import ANSWER_TIMEOUT_S
from ..types import DeadlockCycle, Result, ServerInfo, Survey

if TYPE_CHECKING:  # the seam's Protocols, for annotations only: the seam loads this module
    from ..leftovers import Sweep
    from ..seam import Queue, Scratch, ServerVariables, Session, TableSnapshot, WaitMonitor
from . import NAME
from .dialect import MySqlDialect
from .server import ConnectParams, describe_server, parse_dsn


class MySqlEngine:
    name = NAME

    @property
    def errors(self) -> ModuleType:
        """Error codes by name and by portable class (errors.py)."""
        from . import errors

        return errors

    def dialect(self, server: ServerInfo) -> MySqlDialect:
        return MySqlDialect(server.flavor, server.version)

    def parse_dsn(self, dsn: str) -> ConnectParams:
        return parse_dsn(dsn)

    def server_info(self, params: ConnectParams, embedded: bool) -> ServerInfo:
        """What the server `params` reach says it is."""
        with contextlib.closing(params.connect()) as conn:
            flavor, version = describe_server(conn)
        return ServerInfo(params=params, flavor=flavor, version=version, seam=self, embedded=embedded)

    @contextlib.contextmanager
    def embedded(self, options: tuple[str, ...] = ()) -> Iterator[ServerInfo]:
        """A private throwaway server, started with extra server options, e.g.
        `--innodb-rollback-on-timeout=ON` (a read-only variable is given when a server starts)."""
        from .embedded import EmbeddedServer

        with EmbeddedServer(options) as server:
            yield self.server_info(server.params, embedded=True)

    def sweep(self, params: ConnectParams, dry_run: bool = False) -> Sweep:
        """What killed runs left on the server (leftovers.Sweep), removed unless `dry_run`."""
        from .leftovers import sweep_server

        with contextlib.closing(params.connect(database=None)) as conn:
            return sweep_server(conn, dry_run)

    def confines(self, server: ServerInfo) -> bool:
        """Whether scenario SQL runs as the per-run user: always on the embedded server, whose
        root secure_file_priv keeps from INTO OUTFILE but not from SET GLOBAL general_log_file,
        which appends every statement to any file the server's OS user may write;
        --allow-shared-user is for a DSN user that may not create users."""
        return server.embedded or not server.shared_user

    def scratch(
        self, server: ServerInfo, confine: bool = True, answer_timeout: float = ANSWER_TIMEOUT_S, several_statements: bool = False
    ) -> Scratch:
        """The run's scratch database; `several_statements`: its control connection takes a
        query of several statements (a run's setup)."""
        from .scratch import ScratchDatabase

        return ScratchDatabase(server, confine=confine, multi_statements=several_statements, answer_timeout=answer_timeout)

    def queue(self) -> Queue:
        """The workers' SQL (queue_sql.QueueEngine)."""
        from .queue import MySqlQueue

        return MySqlQueue()

    def wait_monitor(self, control_conn: object, server: ServerInfo) -> WaitMonitor:
        from .waits import WaitMonitor

        return WaitMonitor(control_conn, server.flavor)

    def user_connection(self, scratch: Scratch, answer_timeout: float) -> object:
        """The per-run user's own connection (setup, invariants), several statements a query."""
        return scratch.session_params.connect(database=scratch.name, multi_statements=True, answer_timeout=answer_timeout)

    def session(self, name: str, scratch: Scratch, settings_sql: str | None, answer_timeout: float) -> Session:
        """A scenario session's connection to the scratch database, its settings applied."""
        from .session import connect_session

        return connect_session(name, scratch.session_params, scratch.name, settings_sql, answer_timeout)

    def reset_session(self, session: Session, scratch: Scratch, settings_sql: str | None) -> bool:
        """COM_CHANGE_USER rolls back, drops temporary tables, releases table and user locks
        and resets session variables, at a fifth of the cost of a new connection. False when
        the connection is gone."""
        from .session import reset_session

        return reset_session(session, scratch.session_params, scratch.name, settings_sql)

    def reset_sessions(self, sessions: list[tuple[Session, str | None]], scratch: Scratch) -> list[bool]:
        """reset_session for each (session, settings SQL), in turn."""
        return [self.reset_session(session, scratch, settings_sql) for session, settings_sql in sessions]

    def run_script(self, conn: object, sql: str) -> str | None:
        """Several statements (a scenario's setup); the error as the mysql client shows it, or None."""
        from .session import run_script

        return run_script(conn, sql)

    def answer(self, conn: object, sql: str) -> Result:
        from .session import answer

        return answer(conn, sql)

    def execute(self, conn: object, sql: str) -> None:
        """The tool's own SQL on a control connection, errors as ServerError."""
        from . import control

        control.execute(conn, sql)

    def connection_id(self, conn: object) -> int:
        return conn.thread_id()

    def lock_table(self, monitor: WaitMonitor, database: str, sessions: dict[int, str]):
        from .locks import lock_table

        return lock_table(monitor, database, sessions)

    def read_deadlock(self, monitor: WaitMonitor, database: str, names: dict[int, str], victim: int) -> DeadlockCycle | None:
        from .deadlock import read_deadlock

        return read_deadlock(monitor, database, names, victim)

    def survey(self, scratch: Scratch, steps=()) -> Survey:
        """Whether restoring the tables' rows resets the database after `steps` (their SQL)."""
        from .snapshot import survey

        return survey(scratch, steps)

    def snapshot(self, scratch: Scratch, tables: tuple[str, ...], writer: object) -> TableSnapshot:
        """The tables' rows copied once; `writer` (the per-run user's connection) restores them."""
        from .snapshot import TableSnapshot

        return TableSnapshot(scratch, tables, writer)

    def create_statements(self, params: ConnectParams, tables: tuple[str, ...]) -> str:
        """The tables' CREATE statements, read from the catalog of the DSN's database (catalog.py)."""
        from .catalog import create_statements

        return create_statements(params, tables)

    def variables(self) -> ServerVariables | None:
        """Server variables as --matrix sets them (variables.py)."""
        from .variables import MySqlVariables

        return MySqlVariables()

    def cluster_run(self, server: ServerInfo, scratch: Scratch, answer_timeout: float, nodes: set[int]) -> None:
        """One server: no cluster to run across (galera/engine.py has one)."""
        return None


ENGINE = MySqlEngine()
