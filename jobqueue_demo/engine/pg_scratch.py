"""A run's scratch database on PostgreSQL, with the per-run role confined to it.

As scratch.py for MySQL, and safe on a shared cluster the same way:

- Ownership: the admin connection (to the DSN's database), made before anything is created
  and kept for the whole run, is named `jobqueue-demo <name>` (application_name) and holds the
  session advisory lock `hashtext('<name>')`. Advisory locks are per database, and another
  run may name another database in its DSN; pg_stat_activity is the cluster's. A `jqd_`
  database or role whose run has no such connection, no session of its role and a free lock
  belongs to a run that is gone (sweep_leftovers).
- Confinement: scenario SQL runs as a role `<name>` that may log in and use the scratch
  database's public schema, nothing else; it is made when the DSN's role may create roles.
- PostgreSQL has no USE: the control connection (`conn`) is a second connection, as the
  DSN's role, to the scratch database; the admin connection creates and drops it.
- Dropped with DROP DATABASE ... WITH (FORCE) (PostgreSQL 13+), which ends any session still
  connected to it instead of waiting for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace

from ..errors import ServerError
from . import pg_control as control
from .control import first_failure
from .pg_control import literal, quote
from .pg_errors import LOST_CONNECTION
from .pg_server import APPLICATION
from .pg_session import shut
from .scratch import RUN_NAME, SHARED_USER_OPTION, new_name
from .server import ANSWER_TIMEOUT_S


def _major(version: str) -> int:
    return int(version.split(".")[0])


class PgScratchDatabase:
    """Open with `open()`, always end with `close()`: everything made is dropped, once."""

    def __init__(self, server, confine: bool = True, answer_timeout: float = ANSWER_TIMEOUT_S, **_mysql_only):
        self.server = server
        self.answer_timeout = answer_timeout
        self.name = new_name()
        self.confine = confine
        self.admin = None
        self.conn = None
        self.session_params = replace(server.params, database=self.name)
        self._role: str | None = None
        self._databases: list[str] = []

    def open(self) -> None:
        self.admin = self.server.params.connect(answer_timeout=self.answer_timeout, application=f"{APPLICATION} {self.name}")
        try:
            if not control.flag(self.admin, f"SELECT pg_try_advisory_lock(hashtext({literal(self.name)}))"):
                raise ServerError(f"cannot take the advisory lock {self.name} on {self.server.where}")
            if self.confine:
                self._create_role()
            self.create_database(self.name)
            self.conn = self.server.params.connect(database=self.name, answer_timeout=self.answer_timeout)
            if self._role is not None:
                self.execute(f"GRANT ALL ON SCHEMA public TO {quote(self._role)}")
        except BaseException:
            self.close(quiet=True)
            raise

    def _create_role(self) -> None:
        may = control.value(self.admin, "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
        if may != "t":
            raise ServerError(
                f"{self.server.params.user} may not create the per-run role that confines scenario SQL to its "
                f"scratch database; grant it CREATEROLE, or run with 'jobqueue-demo {SHARED_USER_OPTION} ...' "
                f"(scenario SQL then runs as {self.server.params.user})"
            )
        password = os.urandom(16).hex()
        # Named as made before it is asked for: a stop signal during the statement leaves it
        # made or not, and the clean-up drops it if it exists.
        self._role = self.name
        control.execute(self.admin, f"CREATE ROLE {quote(self.name)} LOGIN PASSWORD {literal(password)}")
        # A DSN role that is not a superuser reaches the role's tables (explore's resets) as its member.
        if control.value(self.admin, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") != "t":
            control.execute(self.admin, f"GRANT {quote(self.name)} TO current_user")
        self.session_params = replace(self.server.params, user=self.name, password=password, database=self.name)

    def create_database(self, name: str, template: str | None = None) -> None:
        """A database this run owns; dropped by close(), or by a later sweep if the run dies."""
        sql = f"CREATE DATABASE {quote(name)}"
        if template is not None:
            sql += f" TEMPLATE {quote(template)}"
        self._databases.append(name)  # before, as for the role
        control.execute(self.admin, sql)

    def recreate(self) -> None:
        """Empty the database for its setup to run again; its sessions stay connected (PostgreSQL
        cannot drop a database that has sessions), so the public schema is dropped instead."""
        self.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        if self._role is not None:
            self.execute(f"GRANT ALL ON SCHEMA public TO {quote(self._role)}")

    def execute(self, sql: str) -> None:
        control.execute(self.conn, sql)

    def rows(self, sql: str) -> tuple:
        return control.rows(self.conn, sql)

    def drop(self, name: str) -> None:
        force = " WITH (FORCE)" if _major(self.server.version) >= 13 else ""
        control.execute(self.admin, f"DROP DATABASE IF EXISTS {quote(name)}{force}")
        if name in self._databases:
            self._databases.remove(name)

    def _drop_all(self) -> control.ControlError | None:
        drops = [lambda name=name: self.drop(name) for name in reversed(self._databases)]
        if self._role is not None:
            drops.append(lambda: control.execute(self.admin, f"DROP ROLE IF EXISTS {quote(self._role)}"))
        return first_failure(drops, LOST_CONNECTION)

    def close(self, quiet: bool = False) -> None:
        """Drop what was made and disconnect, which frees the advisory lock whatever failed."""
        if self.admin is None:
            return
        silent = getattr(self.conn, "dropped", None)
        if silent:  # the server stopped answering the control connection: the admin one would wait as long
            shut(self.admin.pgconn)
        if self.conn is not None:
            with contextlib.suppress(Exception):  # already gone: the drop ends it anyway
                self.conn.close()
            self.conn = None
        try:
            failure = self._drop_all()
        finally:
            with contextlib.suppress(Exception):
                self.admin.close()
            self.admin = None
        if failure is None:
            return
        if not quiet:
            raise failure
        if failure.errno in LOST_CONNECTION:
            return  # the error already raised says the server is gone
        handling = sys.exc_info()[1]
        if isinstance(handling, GeneratorExit):
            handling = handling.__context__
        if handling is not None:
            handling.add_note(str(failure))


def sweep_leftovers(conn, dry_run: bool = False) -> list[tuple[str, str, bool]]:
    """(kind, name, its run is gone) for each `jqd_` database and role of a run; those of runs
    whose advisory lock is free are dropped unless `dry_run`.

    The lock is taken before dropping, so a run cannot be both judged dead and alive.
    """
    databases = [r[0] for r in control.rows(conn, "SELECT datname FROM pg_database WHERE datname LIKE 'jqd\\_%'")]
    roles = [r[0] for r in control.rows(conn, "SELECT rolname FROM pg_roles WHERE rolname LIKE 'jqd\\_%'")]
    runs: dict[str, list[tuple[str, str]]] = {}
    for name in databases:
        run = name if RUN_NAME.match(name) else name.rpartition("_")[0]
        if RUN_NAME.match(run):
            runs.setdefault(run, []).append(("database", name))
    for name in roles:
        if RUN_NAME.match(name):
            runs.setdefault(name, []).append(("user", name))
    found = []
    for run, items in sorted(runs.items()):
        key = f"hashtext({literal(run)})"
        if _alive(conn, run) or not control.flag(conn, f"SELECT pg_try_advisory_lock({key})"):
            found += [(kind, name, False) for kind, name in sorted(items)]
            continue
        try:
            for kind, name in sorted(items):  # databases before the role that may own objects in them
                if not dry_run:
                    drop = "DATABASE IF EXISTS" if kind == "database" else "ROLE IF EXISTS"
                    suffix = " WITH (FORCE)" if kind == "database" else ""
                    control.execute(conn, f"DROP {drop} {quote(name)}{suffix}")
                found.append((kind, name, True))
        finally:
            control.execute(conn, f"SELECT pg_advisory_unlock({key})")
    return found


def _alive(conn, run: str) -> bool:
    """Whether a backend anywhere in the cluster belongs to the run: its admin connection, or
    a session of its role."""
    sql = (
        f"SELECT 1 FROM pg_stat_activity WHERE application_name = {literal(f'{APPLICATION} {run}')} "
        f"OR usename = {literal(run)} LIMIT 1"
    )
    return bool(control.rows(conn, sql))
