"""The engine seam: what run/, explore/ and workers/ ask of a server's engine, behind one interface.

`ServerInfo.seam` is one of these; callers never test which engine they have. MySQL and
MariaDB share one seam (their differences are in dialect.py and waits.py); PostgreSQL has its
own, implemented in the pg_*.py modules. Each factory imports its modules where it is
called, so a run pays only for the engine it uses.
"""

from __future__ import annotations


class MySqlSeam:
    name = "mysql"
    # --matrix (run/matrix.py) sets server variables by their MariaDB/MySQL names and scopes.
    matrix = True

    @property
    def errors(self):
        """Error codes by name and by portable class (mysql_errors.py)."""
        from . import mysql_errors

        return mysql_errors

    def dialect(self, server):
        from .dialect import MySqlDialect

        return MySqlDialect(server.flavor, server.version)

    def parse_dsn(self, dsn: str):
        from .server import parse_dsn

        return parse_dsn(dsn)

    def sweep(self, params, dry_run: bool = False):
        """What killed runs left on the server (leftovers.Sweep), removed unless `dry_run`."""
        from contextlib import closing

        from .leftovers import sweep_server

        with closing(params.connect(database=None)) as conn:
            return sweep_server(conn, dry_run)

    def confines(self, server) -> bool:
        """Whether scenario SQL runs as the per-run user: always on the embedded server, whose
        root secure_file_priv keeps from INTO OUTFILE but not from SET GLOBAL general_log_file,
        which appends every statement to any file the server's OS user may write;
        --allow-shared-user is for a DSN user that may not create users."""
        return server.embedded or not server.shared_user

    def scratch(self, server, **options):
        """The run's scratch database (scratch.ScratchDatabase's options)."""
        from .scratch import ScratchDatabase

        return ScratchDatabase(server, **options)

    def queue(self):
        """The workers' SQL (queue_sql.QueueEngine)."""
        from .mysql_queue import MySqlQueue

        return MySqlQueue()

    def wait_monitor(self, control_conn, server):
        from .waits import WaitMonitor

        return WaitMonitor(control_conn, server.flavor)

    def user_connection(self, scratch, answer_timeout: float):
        """The per-run user's own connection (setup, invariants), several statements a query."""
        return scratch.session_params.connect(database=scratch.name, multi_statements=True, answer_timeout=answer_timeout)

    def session(self, name: str, scratch, settings_sql: str | None, answer_timeout: float):
        """A scenario session's connection to the scratch database, its settings applied."""
        from .session import Session

        conn = scratch.session_params.connect(database=scratch.name, answer_timeout=answer_timeout)
        if settings_sql:
            conn.query(settings_sql.encode())
        return Session(name, conn, conn.thread_id())

    def reset_sessions(self, sessions, scratch) -> list[bool]:
        """reset_session for each (session, settings SQL), in turn."""
        return [self.reset_session(session, scratch, settings_sql) for session, settings_sql in sessions]

    def reset_session(self, session, scratch, settings_sql: str | None) -> bool:
        """COM_CHANGE_USER rolls back, drops temporary tables, releases table and user locks
        and resets session variables, at a fifth of the cost of a new connection. False when
        the connection is gone."""
        import MySQLdb

        from .server import SESSION_INIT

        params = scratch.session_params
        try:
            session.conn.change_user(params.user, params.password, scratch.name)
            session.conn.query(SESSION_INIT.encode())
            if settings_sql:
                session.conn.query(settings_sql.encode())
        except MySQLdb.OperationalError:
            return False
        return True

    def run_script(self, conn, sql: str) -> str | None:
        """Several statements (a scenario's setup); the error as the mysql client shows it, or None."""
        import MySQLdb

        try:
            conn.query(sql.encode("utf-8"))
            while True:
                conn.store_result()  # each statement's result must be read before the next
                if conn.next_result() != 0:
                    return None
        except MySQLdb.Error as e:
            return f"ERROR {e.args[0]}: {e.args[-1]}"

    def answer(self, conn, sql: str):
        from .session import answer

        return answer(conn, sql)

    def execute(self, conn, sql: str) -> None:
        """The tool's own SQL on a control connection, errors as ServerError."""
        from . import control

        control.execute(conn, sql)

    def connection_id(self, conn) -> int:
        return conn.thread_id()

    def lock_table(self, monitor, database: str, sessions: dict[int, str]):
        from .locks import lock_table

        return lock_table(monitor, database, sessions)

    def read_deadlock(self, monitor, database: str, names: dict[int, str], victim: int):
        from .deadlock import read_deadlock

        return read_deadlock(monitor, database, names, victim)

    def survey(self, scratch, steps=()):
        """Whether restoring the tables' rows resets the database after `steps` (their SQL)."""
        from .snapshot import survey

        return survey(scratch, steps)

    def snapshot(self, scratch, tables: tuple[str, ...], writer):
        """The tables' rows copied once; `writer` (the per-run user's connection) restores them."""
        from .snapshot import TableSnapshot

        return TableSnapshot(scratch, tables, writer)


class PgSeam:
    name = "postgresql"
    matrix = False

    @property
    def errors(self):
        from . import pg_errors

        return pg_errors

    def dialect(self, server):
        from .pg_dialect import PgDialect

        return PgDialect(server.flavor, server.version)

    def parse_dsn(self, dsn: str):
        from .pg_server import parse_dsn

        return parse_dsn(dsn)

    def sweep(self, params, dry_run: bool = False):
        from contextlib import closing

        from .leftovers import ALIVE, GONE, KEPT, Found, Sweep, done
        from .pg_scratch import sweep_leftovers

        with closing(params.connect(catalog_names_only=True)) as conn:
            found, problems = sweep_leftovers(conn, dry_run)
        return Sweep(
            [Found(kind, name, done(dry_run), GONE) if gone else Found(kind, name, KEPT, ALIVE) for kind, name, gone in found],
            problems,
        )

    def confines(self, server) -> bool:
        """Whether scenario SQL runs as the per-run role: always on the embedded server, whose
        own role is a superuser, whom nothing keeps from the server's files (COPY ... TO a file
        or a PROGRAM); --allow-shared-user is for a DSN role that may not create roles."""
        return server.embedded or not server.shared_user

    def scratch(self, server, **options):
        from .pg_scratch import PgScratchDatabase

        return PgScratchDatabase(server, **options)

    def queue(self):
        """The workers' SQL (queue_sql.QueueEngine)."""
        from .pg_queue import PgQueue

        return PgQueue()

    def wait_monitor(self, control_conn, server):
        from .pg_waits import PgWaitMonitor

        return PgWaitMonitor(control_conn)

    def user_connection(self, scratch, answer_timeout: float):
        return scratch.session_params.connect(database=scratch.name, answer_timeout=answer_timeout)

    def session(self, name: str, scratch, settings_sql: str | None, answer_timeout: float):
        from .pg_session import connect_session

        return connect_session(name, scratch.session_params, scratch.name, settings_sql, answer_timeout)

    def reset_sessions(self, sessions, scratch) -> list[bool]:
        """A fresh state for each (session, settings SQL) without a new connection, every
        session's reset sent before any answer is read: one round trip for them all (three
        one after another cost 0.5 ms of a 2 ms schedule). Each is ROLLBACK, then what DISCARD
        ALL does (which cannot share a query with ROLLBACK), then its settings. False for a
        session whose connection is gone."""
        from .pg_session import RESET_SESSION, answer_each

        sqls = ["; ".join(filter(None, ("ROLLBACK", RESET_SESSION, settings_sql))) for _, settings_sql in sessions]
        results = answer_each([session.conn for session, _ in sessions], sqls)
        return [result is not None and result.error is None for result in results]

    def reset_session(self, session, scratch, settings_sql: str | None) -> bool:
        return self.reset_sessions([(session, settings_sql)], scratch)[0]

    def run_script(self, conn, sql: str) -> str | None:
        from .pg_session import run_script

        return run_script(conn, sql)

    def answer(self, conn, sql: str):
        from .pg_session import answer

        return answer(conn, sql)

    def execute(self, conn, sql: str) -> None:
        from . import pg_control

        pg_control.execute(conn, sql)

    def connection_id(self, conn) -> int:
        return conn.pgconn.backend_pid

    def lock_table(self, monitor, database: str, sessions: dict[int, str]):
        from .pg_locks import lock_table

        return lock_table(monitor, sessions)

    def read_deadlock(self, monitor, database: str, names: dict[int, str], victim: int):
        from .pg_deadlock import read_deadlock

        return read_deadlock(monitor, names, victim)

    def survey(self, scratch, steps=()):
        from .pg_snapshot import survey

        return survey(scratch, steps)

    def snapshot(self, scratch, tables: tuple[str, ...], writer):
        from .pg_snapshot import PgTableSnapshot

        return PgTableSnapshot(scratch, tables, writer)


_SEAMS = {MySqlSeam.name: MySqlSeam(), PgSeam.name: PgSeam()}


def seam_of(engine: str):
    return _SEAMS[engine]


def seam_of_dsn(dsn: str):
    """The seam a DSN's scheme names: postgresql:// or postgres://, else MySQL's."""
    from .server import is_pg_dsn

    return _SEAMS[PgSeam.name if is_pg_dsn(dsn) else MySqlSeam.name]
