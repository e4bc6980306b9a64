"""PostgreSQL behind the seam (seam.py's Engine).

Each method imports its module where it is called, so a run pays only for what it uses; libpq
itself is loaded when the first connection opens (libpq.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING

from ...errors import UsageError
from ..dsn import ANSWER_TIMEOUT_S
from ..types import DeadlockCycle, Result, ServerInfo, Survey

if TYPE_CHECKING:  # the seam's Protocols, for annotations only: the seam loads this module
    from ..leftovers import Sweep
    from ..seam import Queue, Scratch, ServerVariables, Session, TableSnapshot, WaitMonitor
from . import NAME, TITLE
from .dialect import PgDialect
from .server import PgParams, describe_server, parse_dsn


class PgEngine:
    name = NAME

    @property
    def errors(self) -> ModuleType:
        """SQLSTATEs by name and by portable class (errors.py)."""
        from . import errors

        return errors

    def dialect(self, server: ServerInfo) -> PgDialect:
        return PgDialect(server.flavor, server.version)

    def parse_dsn(self, dsn: str) -> PgParams:
        return parse_dsn(dsn)

    def server_info(self, params: PgParams, embedded: bool) -> ServerInfo:
        return ServerInfo(params=params, flavor="PostgreSQL", version=describe_server(params), seam=self, embedded=embedded)

    @contextlib.contextmanager
    def embedded(self, options: tuple[str, ...] = ()) -> Iterator[ServerInfo]:
        """A private throwaway cluster; server options are MariaDB/MySQL's (--matrix) only."""
        if options:
            raise UsageError(f"server options are for MariaDB/MySQL, not {TITLE}: {' '.join(options)}")
        from .embedded import EmbeddedPostgres

        with EmbeddedPostgres() as server:
            yield self.server_info(server.params, embedded=True)

    def sweep(self, params: PgParams, dry_run: bool = False) -> Sweep:
        from ..leftovers import ALIVE, GONE, KEPT, Found, Sweep, done
        from .scratch import sweep_leftovers

        from .server import keep_spare

        conn = params.connect(catalog_names_only=True)
        try:
            found, problems = sweep_leftovers(conn, dry_run)
        except BaseException:
            conn.close()
            raise
        keep_spare(params, conn)
        return Sweep(
            [Found(kind, name, done(dry_run), GONE) if gone else Found(kind, name, KEPT, ALIVE) for kind, name, gone in found],
            problems,
        )

    def confines(self, server: ServerInfo) -> bool:
        """Whether scenario SQL runs as the per-run role: always on the embedded server, whose
        own role is a superuser, whom nothing keeps from the server's files (COPY ... TO a file
        or a PROGRAM); --allow-shared-user is for a DSN role that may not create roles."""
        return server.embedded or not server.shared_user

    def scratch(
        self, server: ServerInfo, confine: bool = True, answer_timeout: float = ANSWER_TIMEOUT_S, several_statements: bool = False
    ) -> Scratch:
        """The run's scratch database; every simple query may hold several statements here, so
        `several_statements` asks nothing more of it."""
        from .scratch import PgScratchDatabase

        return PgScratchDatabase(server, confine=confine, answer_timeout=answer_timeout)

    def queue(self) -> Queue:
        """The workers' SQL (queue_sql.QueueEngine)."""
        from .queue import PgQueue

        return PgQueue()

    def wait_monitor(self, control_conn: object, server: ServerInfo) -> WaitMonitor:
        from .waits import PgWaitMonitor

        return PgWaitMonitor(control_conn)

    def user_connection(self, scratch: Scratch, answer_timeout: float) -> object:
        return scratch.session_params.connect(database=scratch.name, answer_timeout=answer_timeout)

    def session(self, name: str, scratch: Scratch, settings_sql: str | None, answer_timeout: float) -> Session:
        from .session import connect_session

        return connect_session(name, scratch.session_params, scratch.name, settings_sql, answer_timeout)

    def reset_session(self, session: Session, scratch: Scratch, settings_sql: str | None) -> bool:
        return self.reset_sessions([(session, settings_sql)], scratch)[0]

    def reset_sessions(self, sessions: list[tuple[Session, str | None]], scratch: Scratch) -> list[bool]:
        """A fresh state for each (session, settings SQL) without a new connection, every
        session's reset sent before any answer is read: one round trip for them all (three
        one after another cost 0.5 ms of a 2 ms schedule). Each is ROLLBACK, then what DISCARD
        ALL does (which cannot share a query with ROLLBACK), then its settings. False for a
        session whose connection is gone."""
        from .session import RESET_SESSION, answer_each

        sqls = ["; ".join(filter(None, ("ROLLBACK", RESET_SESSION, settings_sql))) for _, settings_sql in sessions]
        results = answer_each([session.conn for session, _ in sessions], sqls)
        return [result is not None and result.error is None for result in results]

    def run_script(self, conn: object, sql: str) -> str | None:
        from .session import run_script

        return run_script(conn, sql)

    def answer(self, conn: object, sql: str) -> Result:
        from .session import answer

        return answer(conn, sql)

    def execute(self, conn: object, sql: str) -> None:
        from . import control

        control.execute(conn, sql)

    def connection_id(self, conn: object) -> int:
        return conn.pgconn.backend_pid

    def lock_table(self, monitor: WaitMonitor, database: str, sessions: dict[int, str]):
        from .locks import lock_table

        return lock_table(monitor, sessions)

    def read_deadlock(self, monitor: WaitMonitor, database: str, names: dict[int, str], victim: int) -> DeadlockCycle | None:
        from .deadlock import read_deadlock

        return read_deadlock(monitor, names, victim)

    def survey(self, scratch: Scratch, steps=()) -> Survey:
        from .snapshot import survey

        return survey(scratch, steps)

    def snapshot(self, scratch: Scratch, tables: tuple[str, ...], writer: object) -> TableSnapshot:
        from .snapshot import PgTableSnapshot

        return PgTableSnapshot(scratch, tables, writer)

    def create_statements(self, params: PgParams, tables: tuple[str, ...]) -> str:
        """The tables' CREATE statements, read from the catalog of the DSN's database (catalog.py)."""
        from .catalog import create_statements

        return create_statements(params, tables)

    def variables(self) -> ServerVariables | None:
        """None: --matrix sets MariaDB/MySQL server variables (run/matrix.py)."""
        return None

    def cluster_run(self, server: ServerInfo, scratch: Scratch, answer_timeout: float, nodes: set[int]) -> None:
        """No clusters of PostgreSQL here."""
        return None


ENGINE = PgEngine()
