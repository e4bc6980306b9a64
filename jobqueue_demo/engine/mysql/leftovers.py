"""What killed runs left on a MariaDB or MySQL server: scratch databases and per-run users
whose run's named lock is free (scratch.py says why a free lock proves the run gone).
Databases of older versions (`jqd_<10 hex>`, no named lock) are only counted, never dropped:
nothing proves their run is gone."""

from __future__ import annotations

import re

from ..leftovers import ALIVE, GONE, KEPT, REMOVED, WOULD_REMOVE, Found, Sweep
from ..naming import PREFIX, RUN_NAME, SNAPSHOT_SUFFIX
from ..types import ControlError
from . import control
from .scratch import DROP_LOCK_WAIT_S, drop_bounded, literal

OLD_NAME = re.compile(rf"{PREFIX}[0-9a-f]{{10}}({SNAPSHOT_SUFFIX})?")


def run_name(database: str) -> str | None:
    """The run a database belongs to, when it is of the swept pattern."""
    base = database.removesuffix(SNAPSHOT_SUFFIX)
    return base if RUN_NAME.fullmatch(base) else None


def sweep_server(conn, dry_run: bool = False) -> Sweep:
    """Drop the databases and users of runs whose named lock is free."""
    out = Sweep()
    databases = [control.text(r[0]) for r in control.rows(conn, "SHOW DATABASES LIKE 'jqd\\_%'")]
    users = _users(conn)
    runs: dict[str, list[tuple[str, str]]] = {}
    for name in databases:
        run = run_name(name)
        if run is not None:
            runs.setdefault(run, []).append(("database", name))
        elif OLD_NAME.fullmatch(name):
            out.found.append(Found("old database", name, KEPT, "older jobqueue-demo, no named lock: not swept"))
    for user, host in users:
        runs.setdefault(user, []).append(("user", f"{literal(user)}@{literal(host)}"))
    if runs and not dry_run:
        control.execute(conn, f"SET SESSION lock_wait_timeout = {DROP_LOCK_WAIT_S}")
    for run, items in sorted(runs.items()):
        _sweep_run(conn, run, items, dry_run, out)
    return out


def _users(conn) -> list[tuple[str, str]]:
    try:
        found = control.rows(conn, "SELECT User, Host FROM mysql.user WHERE User LIKE 'jqd\\_%'")
    except ControlError as e:
        if e.errno in control.PRIVILEGE_ERRORS:
            return []  # a user that cannot read the accounts made none either
        raise
    pairs = [(control.text(u), control.text(h)) for u, h in found]
    return [(u, h) for u, h in pairs if RUN_NAME.fullmatch(u)]


def _sweep_run(conn, run: str, items: list[tuple[str, str]], dry_run: bool, out: Sweep) -> None:
    if dry_run:
        dead = control.flag(conn, f"SELECT IS_FREE_LOCK({literal(run)})")
        out.found += [Found(kind, name, WOULD_REMOVE, GONE) if dead else Found(kind, name, KEPT, ALIVE) for kind, name in items]
        return
    if not control.flag(conn, f"SELECT GET_LOCK({literal(run)}, 0)"):
        out.found += [Found(kind, name, KEPT, ALIVE) for kind, name in items]
        return
    try:
        for kind, name in sorted(items, key=lambda item: item[0]):  # databases before the user
            try:
                if kind == "database":
                    drop_bounded(conn, name)
                else:
                    control.execute(conn, f"DROP USER IF EXISTS {name}")
                out.found.append(Found(kind, name, REMOVED, GONE))
            except ControlError as e:
                out.problems.append(str(e))
    finally:
        control.execute(conn, f"SELECT RELEASE_LOCK({literal(run)})")
