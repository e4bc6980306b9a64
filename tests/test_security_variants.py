"""Variants of the ways in that tests/test_security_*.py close: each a look-alike of a vector
already handled that the first fix did not see."""

from __future__ import annotations

import secrets
from contextlib import closing

# -- the sweep drops only exact run names ----------------------------------------------------


def _newline_look_alike() -> str:
    """jqd_ and 16 hex digits, then a newline: a regular expression's `$` matches before it."""
    return f"jqd_{secrets.token_hex(8)}\n"


def test_postgresql_sweep_keeps_a_database_named_like_a_run_and_a_newline(pg):
    from jobqueue_demo.engine.pg_control import execute, quote

    name = _newline_look_alike()
    with closing(pg.params.connect()) as admin:
        execute(admin, f"CREATE DATABASE {quote(name)}")
        try:
            found = pg.seam.sweep(pg.params, dry_run=True).found
            assert name not in [f.name for f in found], "the sweep would drop somebody's database"
        finally:
            execute(admin, f"DROP DATABASE IF EXISTS {quote(name)}")


def test_mysql_sweep_keeps_a_user_named_like_a_run_and_a_newline(server):
    from jobqueue_demo.engine.control import execute
    from jobqueue_demo.engine.scratch import literal

    account = f"{literal(_newline_look_alike())}@'jqdtest-nowhere'"
    with closing(server.params.connect(database=None)) as admin:
        execute(admin, f"CREATE USER {account}")
        try:
            found = server.seam.sweep(server.params, dry_run=True).found
            assert account not in [f.name for f in found], "the sweep would drop somebody's user"
        finally:
            execute(admin, f"DROP USER IF EXISTS {account}")
