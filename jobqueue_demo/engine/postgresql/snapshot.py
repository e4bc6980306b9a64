"""Explore's reset on PostgreSQL: the scratch tables as setup left them, copied once into a
schema of the tool's own; a restore empties them and copies the rows back, in one transaction.

Measured by bench/bench_pg_reset.py (embedded server, the skip-locked table, medians of two
runs on a loaded 2-core machine): recreating the database from a template database (CREATE
DATABASE ... TEMPLATE, and every session reconnected, since a database with sessions cannot
be dropped) 160-240 ms; DELETE + INSERT 0.7-1.1 ms; TRUNCATE + INSERT 1.9-3.4 ms (new files
for the table, synced at commit). TRUNCATE is used all the same: it puts every row back where setup put it (the same
ctid, shown in the locks a lesson prints, and the order a scan without ORDER BY meets them),
where DELETE leaves dead rows for the next schedule to step over and the rows drift through
the pages, so one schedule could end differently on its second run. Sequences (serial and
identity columns) are put back with setval. A schedule whose statements cannot have written a
row (row locks only: `may_write`) is not restored at all, which keeps the rows where they were.

Scenario SQL is untrusted: a trigger, rule or CHECK on its tables runs as whoever writes them.
So the restore runs on the per-run role's own connection (`writer`), which may read the copy
and nothing more of the tool's; the DSN's role (often a superuser) only reads and copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schema_change import may_write_rows, steps_obstacle
from ..types import Survey
from . import control
from .control import literal, quote

SNAPSHOT_SCHEMA = "jqd_snapshot"


@dataclass(frozen=True)
class _Table:
    name: str
    columns: tuple[str, ...]


# What makes a restore of the rows no reset, each found by a query on the catalog (of the
# public schema: the per-run role may create nothing elsewhere).
_OBSTACLES = (
    ("SELECT 1 FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid "
     "WHERE c.relnamespace = 'public'::pg_catalog.regnamespace AND NOT t.tgisinternal LIMIT 1",
     "triggers would fire on restore"),
    ("SELECT 1 FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class "
     "WHERE c.relnamespace = 'public'::pg_catalog.regnamespace AND c.relkind = 'r' LIMIT 1",
     "rules would rewrite the restore"),
    # A function or procedure a step calls may make a table, trigger or rule: no text shows it.
    # The per-run role may also make them in its connection's temporary schema, which any
    # session may call by its name (pg_temp_3.f()) for as long as setup's connection lives.
    ("SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
     "WHERE n.nspname = 'public' OR n.nspname LIKE 'pg\\_temp\\_%' LIMIT 1",
     "functions or procedures could change the schema from a step"),
    # A policy runs as whoever reads the table: the DSN's role copying it (when not a superuser,
    # it is a member of the table's owner, and FORCE makes owners obey policies too).
    ("SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace = 'public'::pg_catalog.regnamespace AND relrowsecurity LIMIT 1",
     "row-level security policies would filter the copy and the restore"),
    ("SELECT 1 FROM pg_catalog.pg_constraint WHERE contype = 'f' AND connamespace = 'public'::pg_catalog.regnamespace LIMIT 1",
     "foreign keys fix the order rows can be restored in"),
    ("SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace = 'public'::pg_catalog.regnamespace "
     "AND relkind IN ('m', 'p', 'f') LIMIT 1",
     "materialized, partitioned or foreign tables"),
)


def survey(scratch, steps=()) -> Survey:
    """The public schema's tables, or why restoring their rows would not reset the database
    after `steps` (their SQL)."""
    obstacle = steps_obstacle(steps, mysql=False)
    if obstacle:
        return Survey((), obstacle)
    for sql, why in _OBSTACLES:
        if scratch.rows(sql):
            return Survey((), why)
    found = scratch.rows(
        "SELECT relname FROM pg_catalog.pg_class WHERE relnamespace = 'public'::pg_catalog.regnamespace "
        "AND relkind = 'r' ORDER BY 1"
    )
    return Survey(tuple(r[0] for r in found), None)


class PgTableSnapshot:
    how = "TRUNCATE + INSERT ... SELECT, sessions reset with DISCARD ALL"

    def __init__(self, scratch, tables: tuple[str, ...], writer):
        self.scratch = scratch
        self.writer = writer
        snap = quote(SNAPSHOT_SCHEMA)
        scratch.execute(f"CREATE SCHEMA IF NOT EXISTS {snap}")
        described = [_Table(t, self._columns(t)) for t in tables]
        for table in described:
            # ONLY: a table that others inherit from shows their rows too, which are copied with them.
            scratch.execute(f"CREATE TABLE {snap}.{quote(table.name)} AS TABLE ONLY public.{quote(table.name)}")
        scratch.let_role_read(SNAPSHOT_SCHEMA)
        restores = ["BEGIN"]
        if tables:
            restores.append("TRUNCATE " + ", ".join(f"public.{quote(t)}" for t in tables))
        for table in described:
            # A table with no column to copy (none, or only generated ones) still has rows:
            # an empty column list is PostgreSQL's `SELECT FROM`, and `()` a syntax error.
            cols = ", ".join(quote(c) for c in table.columns)
            into = f" ({cols})" if cols else ""
            restores.append(
                f"INSERT INTO public.{quote(table.name)}{into} OVERRIDING SYSTEM VALUE "
                f"SELECT {cols} FROM {snap}.{quote(table.name)}"
            )
        sequences = self._sequences()
        restores += [
            f"SELECT pg_catalog.setval({literal(seq)}::pg_catalog.regclass, {value}::pg_catalog.int8, {called})"
            for seq, value, called in sequences
        ]
        self.restore_sql = "; ".join(restores + ["COMMIT"])
        self._counted = bool(sequences)

    def may_write(self, sql: str) -> bool:
        """Whether `sql` may leave the tables otherwise than a restore puts them; when none of
        a schedule's statements may, its restore is skipped (a TRUNCATE costs 2-5 ms, as much
        as the rest of a schedule). A row lock leaves every row where it was, with its values;
        a function a SELECT calls writes nothing here, since functions of the scenario's send
        explore to rebuilding (_OBSTACLES), but nextval moves a sequence."""
        return self._counted or may_write_rows(sql, mysql=False)

    def _columns(self, table: str) -> tuple[str, ...]:
        # Generated columns cannot be inserted into; they are computed again.
        found = self.scratch.rows(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
            f"AND table_name = {literal(table)} AND is_generated = 'NEVER' ORDER BY ordinal_position"
        )
        return tuple(r[0] for r in found)

    def _sequences(self) -> list[tuple[str, str, str]]:
        found = self.scratch.rows("SELECT sequencename, last_value, last_value IS NOT NULL FROM pg_catalog.pg_sequences WHERE schemaname = 'public'")
        out = []
        for name, value, called in found:
            qualified = f"public.{quote(name)}"
            if called == "t":
                out.append((qualified, value, "true"))
            else:  # never used: the next value is its start
                start = self.scratch.rows(f"SELECT start_value FROM pg_catalog.pg_sequences WHERE schemaname = 'public' AND sequencename = {literal(name)}")
                out.append((qualified, start[0][0], "false"))
        return out

    def restore(self) -> None:
        control.execute(self.writer, self.restore_sql)
