"""The scratch tables as setup left them, copied once; a restore deletes and re-inserts their rows.

The cheapest correct reset measured (bench/bench_explore.py prints the figures): a
transaction of DELETE and INSERT ... SELECT costs well under a millisecond for a lesson's
tables, where dropping and re-creating the database from setup costs several and TRUNCATE
(DDL, one table rebuild each) in between. AUTO_INCREMENT counters are put back too, but
only when they moved: ALTER TABLE costs as much as the rest together.

The restore writes the scenario's tables on the per-run user's connection (`writer`): a view
or routine of the scenario's with SQL SECURITY INVOKER runs with the scenario's rights, not
the control connection's.
"""

from __future__ import annotations

from ..naming import SNAPSHOT_SUFFIX
from ..schema_change import steps_obstacle
from ..types import Survey
from . import control
from .scratch import ScratchDatabase, quote


def survey(scratch: ScratchDatabase, steps=()) -> Survey:
    """The tables to copy, or why restoring their rows would not reset the database after
    `steps` (their SQL)."""
    obstacle = steps_obstacle(steps, mysql=True)
    if obstacle:
        return Survey((), obstacle)
    db = scratch.name
    if _rows(scratch, f"SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '{db}' LIMIT 1"):
        return Survey((), "triggers would fire on restore")
    # An event runs whatever it holds (DDL too) on its schedule, between any two steps.
    if _rows(scratch, f"SELECT 1 FROM information_schema.EVENTS WHERE EVENT_SCHEMA = '{db}' LIMIT 1"):
        return Survey((), "events could change the schema between steps")
    kinds = dict(_rows(scratch, f"SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{db}'"))
    if any(kind not in ("BASE TABLE", "VIEW") for kind in kinds.values()):
        return Survey((), "sequences or versioned tables")
    return Survey(tuple(sorted(t for t, kind in kinds.items() if kind == "BASE TABLE")), None)


def _rows(scratch: ScratchDatabase, sql: str) -> tuple:
    return tuple(tuple(control.text(v) for v in row) for row in scratch.rows(sql))


class TableSnapshot:
    how = "DELETE + INSERT ... SELECT, sessions reset with COM_CHANGE_USER"

    def __init__(self, scratch: ScratchDatabase, tables: tuple[str, ...], writer):
        self.scratch = scratch
        self.writer = writer
        self.database = scratch.name + SNAPSHOT_SUFFIX
        db, snap = quote(scratch.name), quote(self.database)
        columns = self._columns(tables)
        copies, restores = [], ["SET SESSION foreign_key_checks = 0", "BEGIN"]
        for table in tables:
            t, cols = quote(table), ", ".join(quote(c) for c in columns[table])
            if not cols:
                restores.append(f"DELETE FROM {db}.{t}" + self._default_rows(f"{db}.{t}"))
                continue
            copies.append(f"CREATE TABLE {snap}.{t} LIKE {db}.{t}; INSERT INTO {snap}.{t} ({cols}) SELECT {cols} FROM {db}.{t}")
            restores.append(f"DELETE FROM {db}.{t}; INSERT INTO {db}.{t} ({cols}) SELECT {cols} FROM {snap}.{t}")
        if scratch.server.flavor == "MySQL":
            # MySQL 8 caches AUTO_INCREMENT in information_schema for a day unless told not to (untested here).
            copies.append("SET SESSION information_schema_stats_expiry = 0")
        # Made as one of the run's databases, so it is dropped (or swept) with the run.
        scratch.create_database(self.database)
        if copies:
            scratch.execute("; ".join(copies))
        scratch.let_user_read(self.database)
        self.counters = self._counters()
        self.restore_sql = "; ".join(restores + ["COMMIT", "SET SESSION foreign_key_checks = 1"])

    def may_write(self, sql: str) -> bool:
        """Always: a stored function a SELECT calls may write rows (nothing here looks for them)."""
        return True

    def _default_rows(self, table: str) -> str:
        """A table whose columns are all generated (MariaDB allows it; none at all it does
        not): its rows are alike, so setup's count of them is all there is to put back."""
        count = int(_rows(self.scratch, f"SELECT COUNT(*) FROM {table}")[0][0])
        return f"; INSERT INTO {table} () VALUES {', '.join(['()'] * count)}" if count else ""

    def _columns(self, tables: tuple[str, ...]) -> dict[str, list[str]]:
        # Generated columns cannot be inserted into; invisible ones are missed by SELECT *.
        out: dict[str, list[str]] = {t: [] for t in tables}
        for table, column in _rows(
            self.scratch,
            "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
            f"WHERE TABLE_SCHEMA = '{self.scratch.name}' AND EXTRA NOT LIKE '%GENERATED%' "
            "ORDER BY TABLE_NAME, ORDINAL_POSITION",
        ):
            if table in out:
                out[table].append(column)
        return out

    def _counters(self) -> dict[str, int]:
        rows = _rows(
            self.scratch,
            "SELECT TABLE_NAME, AUTO_INCREMENT FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA = '{self.scratch.name}' AND AUTO_INCREMENT IS NOT NULL",
        )
        return {table: int(value) for table, value in rows}

    def restore(self) -> None:
        control.execute(self.writer, self.restore_sql)
        if self.counters:
            moved = {t: n for t, n in self._counters().items() if self.counters.get(t) != n}
            for table in moved:
                self.scratch.execute(
                    f"ALTER TABLE {quote(self.scratch.name)}.{quote(table)} AUTO_INCREMENT = {self.counters[table]}"
                )
