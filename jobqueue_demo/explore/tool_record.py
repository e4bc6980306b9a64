"""`explore --queue`: the tool's own record (jqd_claims, jqd_effects, jqd_done, jqd_commits)
checked against what its sessions saw commit, after each schedule.

The record's rows are written by the tool's steps, but in the scratch database, where the
queue file's SQL runs as the same user and could reach them (a PL/pgSQL body can spell
their names at run time). The invariants read those tables; so first the tool works out,
from the schedule's own events, which of its record steps committed, and the tables must
hold exactly those rows. A step counts when it answered without error and either ran
outside a transaction or its session's next COMMIT committed (no error, and not PostgreSQL's
`ROLLBACK` answer to a COMMIT of a failed transaction). A deadlock or a serialization failure
ends the transaction (MariaDB rolls it back; PostgreSQL aborts it, and its later statements
fail), as a fault done to the session does.
"""

from __future__ import annotations

import re
from collections import Counter

from ..run import events as ev
from ..scenario.model import Invariant

NAME = "the tool's record holds what its sessions committed"
RECORD = re.compile(r"INSERT INTO (jqd_claims|jqd_effects|jqd_done) \(job_id, worker\) VALUES \((\S+), (-?\d+)\)$")
MARK = re.compile(r"INSERT INTO jqd_commits \(what, job_id\) VALUES \('(\w+)', (\S+)\)$")
TABLES = ("jqd_claims", "jqd_effects", "jqd_done")
# The three tables in one round trip: it is paid after every schedule.
READ = " UNION ALL ".join(f"SELECT '{table}', job_id, worker FROM {table}" for table in TABLES)
MARKS = "SELECT what, job_id FROM jqd_commits ORDER BY seq"
ENDS_TRANSACTION = ("deadlock", "serialization-failure")
INVARIANT = Invariant(NAME, "", (), 0, "always")


def committed(events) -> tuple[dict[str, Counter], list[tuple[str, str]]]:
    """The rows of each record table, and the marks in order, that the schedule committed."""
    rows: dict[str, Counter] = {table: Counter() for table in TABLES}
    marks: list[tuple[str, str]] = []
    pending: dict[str, list] = {}
    for event in events:
        if isinstance(event, ev.FaultApplied):
            pending.pop(event.session, None)
        if not isinstance(event, ev.Completed):
            continue
        session, result, sql = event.session, event.result, event.sql.strip()
        if result.error is not None:
            if result.error.error_class in ENDS_TRANSACTION:
                pending.pop(session, None)
            continue
        if sql == "BEGIN":
            pending[session] = []
        elif sql == "ROLLBACK":
            pending.pop(session, None)
        elif sql == "COMMIT":
            done = pending.pop(session, [])
            if result.tag != "ROLLBACK":
                _apply(done, rows, marks)
        elif (found := RECORD.match(sql) or MARK.match(sql)) is not None:
            if session in pending:
                pending[session].append(found)
            else:
                _apply([found], rows, marks)
    return rows, marks


def _apply(found: list, rows: dict[str, Counter], marks: list) -> None:
    for match in found:
        if match.re is RECORD:
            rows[match.group(1)][(_value(match.group(2)), match.group(3))] += 1
        else:
            marks.append((match.group(1), _value(match.group(2))))


def _value(text: str) -> str | None:
    return None if text.upper() == "NULL" else text


def difference(events, read, with_marks: bool) -> str | None:
    """The first place the tables differ from what the schedule committed; None when they agree.
    `read(sql)` answers as the invariants are answered; `with_marks`: the scenario writes jqd_commits."""
    rows, marks = committed(events)
    got = read(READ)
    if got.error is not None:
        return f"the tool's tables could not be read: {got.error}"
    for table in TABLES:
        held = Counter((job, worker) for name, job, worker in got.rows if name == table)
        if held != rows[table]:
            return f"{table} holds {_rows(held)}, the sessions committed {_rows(rows[table])}"
    if with_marks:
        got = read(MARKS)
        held = [tuple(row) for row in got.rows] if got.error is None else None
        if held != marks:
            return f"jqd_commits holds {held}, the sessions committed {marks}"
    return None


def writes_marks(steps) -> bool:
    return any(MARK.match(getattr(step, "sql", "")) for step in steps)


def _rows(counter: Counter) -> str:
    return "[" + ", ".join(f"job {job} by {worker}" + (f" x{n}" if n > 1 else "") for (job, worker), n in sorted(
        counter.items(), key=str)) + "]"
