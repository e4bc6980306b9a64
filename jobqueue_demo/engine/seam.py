"""The engine seam: what run/, explore/ and workers/ ask of a server's engine, behind one interface.

`ServerInfo.seam` is one of these; callers never test which engine they have. MySQL and
MariaDB share one seam (their differences are in dialect.py and waits.py); PostgreSQL has its
own, implemented in the pg_*.py modules. Each factory imports its modules where it is
called, so a run pays only for the engine it uses.
"""

from __future__ import annotations


class MySqlSeam:
    name = "mysql"

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

    def scratch(self, server, **options):
        """The run's scratch database (scratch.ScratchDatabase's options)."""
        from .scratch import ScratchDatabase

        return ScratchDatabase(server, **options)


class PgSeam:
    name = "postgresql"

    def dialect(self, server):
        from .pg_dialect import PgDialect

        return PgDialect(server.flavor, server.version)

    def parse_dsn(self, dsn: str):
        from .pg_server import parse_dsn

        return parse_dsn(dsn)

    def sweep(self, params, dry_run: bool = False):
        from contextlib import closing

        from .leftovers import GONE, Found, Sweep, done
        from .pg_scratch import sweep_leftovers

        with closing(params.connect()) as conn:
            found = sweep_leftovers(conn, dry_run)
        return Sweep([Found(kind, name, done(dry_run), GONE) for kind, name, _ in found])

    def scratch(self, server, **options):
        from .pg_scratch import PgScratchDatabase

        return PgScratchDatabase(server, **options)


_SEAMS = {MySqlSeam.name: MySqlSeam(), PgSeam.name: PgSeam()}


def seam_of(engine: str):
    return _SEAMS[engine]


def seam_of_dsn(dsn: str):
    """The seam a DSN's scheme names: postgresql:// or postgres://, else MySQL's."""
    from .pg_server import is_pg_dsn

    return _SEAMS[PgSeam.name if is_pg_dsn(dsn) else MySqlSeam.name]
