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
- Names: the per-run role owns `public` in the scratch database, so a name the DSN's role
  resolves there could be the scenario's function or operator, run with the DSN's rights
  (CVE-2018-1058's pattern). Both connections have an empty search_path, as pg_dump's: an
  unqualified name is pg_catalog's or nothing, and the scenario's tables are named
  `public."t"`. What writes those tables runs as the per-run role (snapshot.py).
  Unconfined, the control connection keeps the default: nothing there is anyone else's.
- Dropped with DROP DATABASE ... WITH (FORCE) (PostgreSQL 13+), which ends any session still
  connected to it instead of waiting for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace

from ...errors import ServerError
from ..deadlines import uninterrupted
from ..dsn import ANSWER_TIMEOUT_S
from ..naming import RUN_NAME, SHARED_USER_OPTION, USER_CONNECTIONS, new_name
from ..types import DROPS_WITH_SERVER, ControlError, first_failure
from . import control
from .control import literal, quote
from .errors import LOST_CONNECTION
from .server import APPLICATION
from .session import shut


def _major(version: str) -> int:
    return int(version.split(".")[0])


class PgScratchDatabase:
    """Open with `open()`, always end with `close()`: everything made is dropped, once."""

    def __init__(self, server, confine: bool = True, answer_timeout: float = ANSWER_TIMEOUT_S):
        self.server = server
        self.answer_timeout = answer_timeout
        self.name = new_name()
        self.confine = confine
        self.admin = None
        self.conn = None
        self.session_params = replace(server.params, database=self.name)
        self._role: str | None = None
        self._databases: list[str] = []
        self._parameters: list[str] = []  # superuser-only settings the role was let set

    def open(self) -> None:
        self.admin = self.server.params.connect(
            answer_timeout=self.answer_timeout, application=f"{APPLICATION} {self.name}", catalog_names_only=True
        )
        try:
            if not control.flag(self.admin, f"SELECT pg_try_advisory_lock(hashtext({literal(self.name)}))"):
                raise ServerError(f"cannot take the advisory lock {self.name} on {self.server.where}")
            if self.confine:
                self._create_role()
            self.create_database(self.name)
            # Unconfined (the workers, --allow-shared-user), every object there is the DSN role's own.
            self.conn = self.server.params.connect(
                database=self.name, answer_timeout=self.answer_timeout, catalog_names_only=self.confine
            )
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
        stored = scram_verifier(password) if _major(self.server.version) >= 10 else password
        control.slow_statement(
            self.admin, f"CREATE ROLE {quote(self.name)} LOGIN PASSWORD {literal(stored)} CONNECTION LIMIT {USER_CONNECTIONS}"
        )
        if self._role_defaults():
            control.execute(self.admin, self._role_defaults())
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
        control.slow_statement(self.admin, sql)

    def _role_defaults(self) -> str:
        """The per-run role's own session defaults, set when it is made and again after a reset."""
        if _major(self.server.version) < 14:
            return ""
        # The server notices a client gone only when it next writes to it: a statement of a
        # run killed with kill -9 (pg_sleep(1e6)) would go on, and the run count as alive
        # (sweep_leftovers), for as long as it runs. Checked every second, it ends.
        return f"ALTER ROLE {quote(self.name)} SET client_connection_check_interval = '1s'"

    def recreate(self) -> None:
        """Empty the database for its setup to run again; its sessions stay connected (PostgreSQL
        cannot drop a database that has sessions), so what the scenario made goes instead: all
        the per-run role owns or was granted here (DROP OWNED: its tables, functions, large
        objects, its SET ON PARAMETER grants), the public schema, and the session defaults it may
        give itself (ALTER ROLE CURRENT_USER SET search_path = ...), which its next connections
        would take: a later run on the same database (verify's specs) starts from nothing of it."""
        if self._role is None:
            self.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            return
        role = quote(self._role)
        self.execute("; ".join(filter(None, (
            f"DROP OWNED BY {role}", f"ALTER ROLE {role} RESET ALL", self._role_defaults(),
            "DROP SCHEMA public CASCADE", "CREATE SCHEMA public", f"GRANT ALL ON SCHEMA public TO {role}",
        ))))
        self._parameters.clear()  # revoked by DROP OWNED

    def let_role_read(self, schema: str) -> None:
        """The per-run role may read the tables of one of the tool's schemas (not write them)."""
        if self._role is not None:
            role = quote(self._role)
            self.execute(f"GRANT USAGE ON SCHEMA {quote(schema)} TO {role}; GRANT SELECT ON ALL TABLES IN SCHEMA {quote(schema)} TO {role}")

    def let_role_set(self, parameters: tuple[str, ...]) -> None:
        """The per-run role may SET these superuser-only settings (PostgreSQL 15's GRANT SET ON
        PARAMETER), for the scenario SQL that sets them as written; revoked before the role is
        dropped. Unconfined, before 15, or by a DSN role that is no superuser (only one may
        grant it), nothing is granted: the SET is refused as it would be."""
        if self._role is None or not parameters or _major(self.server.version) < 15:
            return
        if control.value(self.admin, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") != "t":
            return
        for name in parameters:
            if name in self._parameters:  # granted for an earlier spec on the same scratch database
                continue
            self._parameters.append(name)  # before, as for the role
            control.execute(self.admin, f"GRANT SET ON PARAMETER {quote(name)} TO {quote(self._role)}")

    def execute(self, sql: str) -> None:
        control.execute(self.conn, sql)

    def rows(self, sql: str) -> tuple:
        return control.rows(self.conn, sql)

    def drop(self, name: str) -> None:
        force = " WITH (FORCE)" if _major(self.server.version) >= 13 else ""
        control.execute(self.admin, f"DROP DATABASE IF EXISTS {quote(name)}{force}")
        if name in self._databases:
            self._databases.remove(name)

    def _drop_all(self) -> ControlError | None:
        drops = [lambda name=name: self.drop(name) for name in reversed(self._databases)]
        if self._role is not None:
            role = quote(self._role)
            drops += [lambda p=p: control.execute(self.admin, f"REVOKE SET ON PARAMETER {quote(p)} FROM {role}") for p in self._parameters]
            drops.append(lambda: control.execute(self.admin, f"DROP ROLE IF EXISTS {role}"))
        return first_failure(drops, LOST_CONNECTION)

    @uninterrupted()
    def close(self, quiet: bool = False) -> None:
        """Drop what was made and disconnect, which frees the advisory lock whatever failed."""
        if self.admin is None:
            return
        silent = self.conn is not None and self.conn.dropped
        if silent:  # the server stopped answering the control connection: the admin one would wait as long
            shut(self.admin.pgconn)
        if self.conn is not None:
            with contextlib.suppress(Exception):  # already gone: the drop ends it anyway
                self.conn.close()
            self.conn = None
        try:
            # On an embedded server this command started, everything goes with the server a moment
            # later (an immediate shutdown): DROP DATABASE would wait for a checkpoint first.
            failure = None if self.server.drops == DROPS_WITH_SERVER else self._drop_all()
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


def sweep_leftovers(conn, dry_run: bool = False) -> tuple[list[tuple[str, str, bool]], list[str]]:
    """(kind, name, its run is gone) for each database and role named as a run, and what could
    not be dropped (as messages); those of runs whose advisory lock is free are dropped unless
    `dry_run`.

    The lock is taken before dropping, so a run cannot be both judged dead and alive. A drop
    the server refuses (a role of a run's name that owns something elsewhere, which no run
    leaves: it drops its database first) is told, not raised: the sweep starts every run.
    """
    named = control.rows(conn, (
        "SELECT 'database', datname FROM pg_catalog.pg_database WHERE datname LIKE 'jqd\\_%' "
        "UNION ALL SELECT 'user', rolname FROM pg_catalog.pg_roles WHERE rolname LIKE 'jqd\\_%'"
    ))
    databases = [name for kind, name in named if kind == "database"]
    roles = [name for kind, name in named if kind == "user"]
    runs: dict[str, list[tuple[str, str]]] = {}
    # Exactly the names a run makes here: its database and its role share the run's name, and
    # nothing else is ours (`jqd_<16 hex>_anything` is somebody's database that looks alike).
    for kind, name in [("database", d) for d in databases] + [("user", r) for r in roles]:
        if RUN_NAME.fullmatch(name):
            runs.setdefault(name, []).append((kind, name))
    found, problems = [], []
    for run, items in sorted(runs.items()):
        key = f"hashtext({literal(run)})"
        if _alive(conn, run) or not control.flag(conn, f"SELECT pg_try_advisory_lock({key})"):
            found += [(kind, name, False) for kind, name in sorted(items)]
            continue
        try:
            for kind, name in sorted(items):  # databases before the role that may own objects in them
                refused = None if dry_run else _drop_leftover(conn, kind, name)
                if refused:
                    problems.append(refused)
                else:
                    found.append((kind, name, True))
        finally:
            control.execute(conn, f"SELECT pg_advisory_unlock({key})")
    return found, problems


def _drop_leftover(conn, kind: str, name: str) -> str | None:
    """Drop a dead run's database or role; why the server refused, if it did."""
    sql = f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)" if kind == "database" else f"DROP ROLE IF EXISTS {quote(name)}"
    try:
        if kind == "user":
            _revoke_parameters(conn, name)
        control.execute(conn, sql)
    except ControlError as e:
        if e.errno in LOST_CONNECTION:
            raise
        return str(e)
    return None


def _revoke_parameters(conn, role: str) -> None:
    """What let_role_set granted a dead run's role, revoked: until then the role cannot be dropped."""
    if int(control.value(conn, "SELECT current_setting('server_version_num')") or 0) < 150000:
        return
    found = control.rows(conn, (
        "SELECT a.parname FROM pg_catalog.pg_parameter_acl a, pg_catalog.aclexplode(a.paracl) e "
        f"WHERE e.grantee = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = {literal(role)})"
    ))
    for (parameter,) in found:
        control.execute(conn, f"REVOKE SET ON PARAMETER {quote(parameter)} FROM {quote(role)}")


def _alive(conn, run: str) -> bool:
    """Whether a backend anywhere in the cluster belongs to the run: its admin connection, or
    a session of its role."""
    sql = (
        f"SELECT 1 FROM pg_stat_activity WHERE application_name = {literal(f'{APPLICATION} {run}')} "
        f"OR usename = {literal(run)} LIMIT 1"
    )
    return bool(control.rows(conn, sql))


def scram_verifier(password: str, iterations: int = 1) -> str:
    """The password as PostgreSQL stores it for SCRAM-SHA-256 (RFC 5802, 7677), made here: given
    in plain, the server hashes it with 4096 rounds (6-10 ms of CREATE ROLE), and so does libpq
    at every login where the server asks for SCRAM (the embedded server does). The rounds slow
    the guessing of a weak password from a stolen hash; this one is 128 random bits, for one run."""
    import base64
    import hashlib
    import hmac

    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    server_key = hmac.digest(salted, b"Server Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"
