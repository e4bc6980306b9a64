"""Naming what went wrong in a counterexample, from what its schedule did.

The schedule's own record is read, not the scenario's title: which statement read which
captured value, which later statement used it, when each transaction committed. Two
patterns are named, in the terms of Adya's and hermitage's catalogues:

- lost update (P4): two sessions read the same captured value, one of them before the
  other's commit, and both then committed a write that used it. Where the value goes in the
  second write names the case: written (an overwrite), or only picking the row (in a queue,
  a double claim: both took the same job);
- non-repeatable read (P2): one transaction ran the same read twice and got different
  rows, with another session's commit in between;
- dirty read (G1a/G1b): a session running READ UNCOMMITTED read a table while another
  session's write to it was not yet committed (and was later rolled back, or committed);
- write skew (G2-item): two transactions each read a table the other then wrote, both
  committed, and their writes picked different rows (the same rows would be a lost update).

Tables are told from the statements' text (FROM, JOIN, UPDATE, INSERT INTO, ...) and rows
from the written statement's WHERE, as sent: the record holds no finer grain than that.

Anything else gets no sentence rather than a guessed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..run import events as ev
from ..scenario.model import CAPTURE_REF, Statement

BEGINS = re.compile(r"^\s*(BEGIN|START\s+TRANSACTION)\b", re.IGNORECASE)
ENDS = re.compile(r"^\s*(COMMIT|ROLLBACK)\b", re.IGNORECASE)
READS = re.compile(r"^\s*(SELECT|WITH)\b", re.IGNORECASE)
WHERE = re.compile(r"\bWHERE\b", re.IGNORECASE)
UPDATES = re.compile(r"^\s*UPDATE\b", re.IGNORECASE)
INSERTS = re.compile(r"^\s*(INSERT|REPLACE)\b", re.IGNORECASE)
READ_TABLES = re.compile(r"\b(?:FROM|JOIN)\s+`?(\w+)`?", re.IGNORECASE)
WRITE_TABLE = re.compile(r"^\s*(?:UPDATE|INSERT\s+(?:IGNORE\s+)?INTO|REPLACE\s+INTO|DELETE\s+FROM)\s+`?(\w+)`?", re.IGNORECASE)


@dataclass(frozen=True)
class Explanation:
    anomaly: str  # e.g. "lost update (a double claim)"
    cause: str  # the steps that cause it, by their schedule labels


@dataclass(frozen=True)
class Pair:
    """An anomaly between two transactions, so that a lost update is not named twice."""

    first: tuple[str, int]
    second: tuple[str, int]
    explanation: Explanation


@dataclass(frozen=True)
class Done:
    """One statement that answered, placed in the schedule."""

    at: int  # its place among the answers: what happened before what
    session: str
    label: str  # the move that sent it, e.g. "B5"
    sql: str
    event: ev.Completed
    step: Statement
    txn: int | None  # the session's explicit transaction it ran in, counted from 1; None: autocommit


@dataclass(frozen=True)
class Chain:
    """A read that captured a value and a later write of the same session that used it."""

    name: str
    value: str | None
    read: Done
    write: Done


def explain(scenario, moves, events) -> list[Explanation]:
    """What the schedule's answers show, as named anomalies; empty when no pattern fits."""
    done = _answers(scenario, moves, events)
    commits = _commits(done)
    lost = _lost_updates(done, commits)
    told = {frozenset((e.first, e.second)) for e in lost}
    uncommitted = {s.name for s in scenario.sessions if s.isolation == "read-uncommitted"}
    return (
        [e.explanation for e in lost]
        + _write_skews(done, commits, told)
        + _non_repeatable(done, commits)
        + _dirty_reads(done, uncommitted)
    )


def _answers(scenario, moves, events) -> list[Done]:
    labels = {}
    tracks: dict[str, list[int]] = {}
    for index, step in enumerate(scenario.steps):
        if getattr(step, "session", None):
            tracks.setdefault(step.session, []).append(index)
    for move in moves:  # a fault stands in the place of the step it replaced
        labels[tracks[move.session][move.position]] = str(move)
    out, count, open_ = [], dict.fromkeys(tracks, 0), dict.fromkeys(tracks, False)
    for event in events:
        if not isinstance(event, ev.Completed) or not isinstance(scenario.steps[event.index], Statement):
            continue
        step = scenario.steps[event.index]
        if BEGINS.match(event.sql):
            count[event.session] += 1
            open_[event.session] = True
        txn = count[event.session] if open_[event.session] else None
        out.append(Done(len(out), event.session, labels.get(event.index, "?"), event.sql, event, step, txn))
        error = event.result.error
        if ENDS.match(event.sql) or (error is not None and error.error_class == "deadlock"):
            open_[event.session] = False  # a deadlock victim's transaction is rolled back
    return out


def _commits(done: list[Done]) -> dict[tuple[str, int], Done]:
    """(session, transaction) -> what made it durable: its COMMIT, or an autocommit statement itself."""
    out = {}
    for d in done:
        if d.event.result.error is not None:
            continue
        if d.sql.split()[0].upper().startswith("COMMIT") or (d.txn is None and not READS.match(d.sql) and not ENDS.match(d.sql)):
            out[_txn_key(d)] = d
    return out


def _txn_key(d: Done) -> tuple[str, int]:
    """An autocommit statement is a transaction of its own, keyed apart by its place."""
    return (d.session, d.txn if d.txn is not None else -d.at - 1)


def _chains(done: list[Done]) -> list[Chain]:
    out = []
    for write in done:
        result = write.event.result
        acted = result.matched if UPDATES.match(write.sql) and result.matched is not None else result.affected
        if READS.match(write.step.sql) or result.error is not None or not acted:
            continue
        for name in dict.fromkeys(CAPTURE_REF.findall(write.step.sql)):
            reads = [d for d in done[: write.at] if d.session == write.session and d.step.capture == name]
            if reads and reads[-1].event.result.rows:
                read = reads[-1]
                out.append(Chain(name, read.event.result.rows[0][0], read, write))
    return out


def _lost_updates(done: list[Done], commits) -> list[Pair]:
    committed = [c for c in _chains(done) if _txn_key(c.write) in commits]
    out, told = [], set()
    for first in committed:
        first_commit = commits[_txn_key(first.write)]
        for second in committed:
            second_commit = commits[_txn_key(second.write)]
            if second.read.session == first.read.session or second.value != first.value:
                continue
            if not (second.read.at < first_commit.at < second_commit.at) or not _same_rows(first.write, second.write):
                continue
            key = (first.write.session, second.write.session, first.name, first.value)
            if key in told:
                continue
            told.add(key)
            explanation = _lost_update(first, second, first_commit, second_commit)
            out.append(Pair(_txn_key(first.write), _txn_key(second.write), explanation))
    return out


def _same_rows(one: Done, other: Done) -> bool:
    """Whether two writes picked the same rows: the same table and, for UPDATE and DELETE, the
    same WHERE, as sent; for an INSERT the whole statement (the rows it adds)."""
    return _written(one) == _written(other) and _picked(one.sql) == _picked(other.sql)


def _written(d: Done) -> str | None:
    match = WRITE_TABLE.match(d.sql)
    return match.group(1).lower() if match else None


def _picked(sql: str) -> str:
    where = None if INSERTS.match(sql) else WHERE.search(sql)
    return " ".join(sql[where.end() if where else 0 :].split()).rstrip(";")


def _read_tables(d: Done) -> set[str]:
    return {t.lower() for t in READ_TABLES.findall(d.sql)} if READS.match(d.sql) else set()


def _lost_update(first: Chain, second: Chain, first_commit: Done, second_commit: Done) -> Explanation:
    """Both committed a write based on one read; where the read's value went in the second
    write tells the story: the value written (an overwrite) or the row chosen (a double claim)."""
    a, b = first.write.session, second.write.session
    value = f"{first.name} = {_text(first.value)}"
    head = f"{b} read {value} at {second.read.label}, before {_committed(first_commit)}"
    both = f"and both committed ({a} at {first_commit.label}, {b} at {second_commit.label})."
    if _chooses_row(second.write.step.sql, second.name):
        cause = (
            f"{head} ({a} had acted on it at {first.write.label}); {b}'s write at {second.write.label} "
            f"acted on the same row again, {both}"
        )
        return Explanation("double claim (a lost update: two transactions took the same item)", cause)
    cause = (
        f"{head}; {b}'s write at {second.write.label}, computed from that stale value, overwrote "
        f"{a}'s write at {first.write.label}, {both}"
    )
    return Explanation("lost update", cause)


def _chooses_row(sql: str, name: str) -> bool:
    """Whether the captured value only picks the row (after WHERE), rather than being written."""
    where = WHERE.search(sql)
    refs = [m.start() for m in CAPTURE_REF.finditer(sql) if m.group(1) == name]
    return where is not None and all(r > where.start() for r in refs)


def _non_repeatable(done: list[Done], commits) -> list[Explanation]:
    out = []
    reads = [d for d in done if READS.match(d.sql) and d.event.result.error is None and d.event.result.is_rows]
    for i, first in enumerate(reads):
        again = next((d for d in reads[i + 1 :] if (d.session, d.txn, d.sql) == (first.session, first.txn, first.sql)), None)
        if again is None or again.txn is None or again.event.result.rows == first.event.result.rows:
            continue
        between = [c for (s, _), c in commits.items() if s != first.session and first.at < c.at < again.at]
        if not between:
            continue
        commit = min(between, key=lambda c: c.at)
        cause = (
            f"{first.session} ran the same read at {first.label} and {again.label} in one transaction and got "
            f"different rows; {_committed(commit)} came in between."
        )
        out.append(Explanation("non-repeatable read", cause))
    return out


def _write_skews(done: list[Done], commits, told: set) -> list[Explanation]:
    """Two committed transactions, each reading before the other's commit a table the other
    wrote there: a cycle of read-write dependencies (G2-item) over different rows."""
    steps = [d for d in done if d.txn is not None and d.event.result.error is None and _txn_key(d) in commits]
    out, seen = [], set()
    for a_read in steps:
        for b_read in steps:
            a, b = _txn_key(a_read), _txn_key(b_read)
            if a_read.session >= b_read.session or frozenset((a, b)) in told | seen:
                continue
            a_commit, b_commit = commits[a], commits[b]
            if not (a_read.at < b_commit.at and b_read.at < a_commit.at):
                continue
            a_write = _write_of(steps, a, a_read, _read_tables(b_read))
            b_write = _write_of(steps, b, b_read, _read_tables(a_read))
            if a_write is None or b_write is None or _same_rows(a_write, b_write):
                continue
            seen.add(frozenset((a, b)))
            out.append(_write_skew(a_read, b_read, a_write, b_write, a_commit, b_commit))
    return out


def _write_of(steps: list[Done], txn: tuple[str, int], after: Done, tables: set[str]) -> Done | None:
    """The transaction's first write, after its read, to a table the other transaction read."""
    return next(
        (d for d in steps if _txn_key(d) == txn and d.at > after.at and _written(d) in tables and d.event.result.affected),
        None,
    )


def _write_skew(a_read: Done, b_read: Done, a_write: Done, b_write: Done, a_commit: Done, b_commit: Done) -> Explanation:
    a, b = a_read.session, b_read.session
    table = _written(a_write)
    changed = f"added different rows to {table}" if INSERTS.match(a_write.sql) else f"changed different rows of {table}"
    cause = (
        f"{a} read {_named(a_read, b_write)} at {a_read.label} and {b} read {_named(b_read, a_write)} at "
        f"{b_read.label}, each before the other's commit; {a}'s write at {a_write.label} and {b}'s at "
        f"{b_write.label} then {changed}, a table the other had read, and both "
        f"committed ({a} at {a_commit.label}, {b} at {b_commit.label}): each acted on what the other's write "
        "made untrue."
    )
    return Explanation("write skew", cause)


def _named(read: Done, write: Done) -> str:
    """What a read saw of the table the other side wrote: its capture, else the table."""
    if read.step.capture and read.event.result.rows:
        return f"{read.step.capture} = {_text(read.event.result.rows[0][0])}"
    return _written(write) or "the table"


def _dirty_reads(done: list[Done], uncommitted: set[str]) -> list[Explanation]:
    """A READ UNCOMMITTED read of a table while another session's write to it was open."""
    out = []
    for read in done:
        tables = _read_tables(read)
        if read.session not in uncommitted or not tables or read.event.result.error is not None:
            continue
        open_writes = [
            (d, end)
            for d in done[: read.at]
            if d.session != read.session and d.txn is not None and _written(d) in tables and d.event.result.affected
            and d.event.result.error is None and ((end := _end(done, d)) is None or end.at > read.at)
        ]
        if open_writes:
            out.append(_dirty_read(done, read, *open_writes[-1]))
    return out


def _end(done: list[Done], write: Done) -> Done | None:
    """The COMMIT or ROLLBACK that ended the write's transaction; None if nothing did."""
    return next((d for d in done[write.at + 1 :] if d.session == write.session and ENDS.match(d.sql)), None)


def _dirty_read(done: list[Done], read: Done, write: Done, end: Done | None) -> Explanation:
    """How the writer's transaction went on tells which dirty read: of a write later rolled
    back (G1a), of a state a later write of the same transaction replaced (G1b), or plain."""
    a = write.session
    again = next((d for d in done[read.at + 1 :] if _txn_key(d) == _txn_key(write) and _written(d) == _written(write)), None)
    if end is None:
        rest = f", which {a} never committed: the schedule ends with it undone"
    elif not end.sql.split()[0].upper().startswith("COMMIT"):
        rest = f" and before {a}'s rollback at {end.label}: a value that was never committed"
    elif again is not None and again.at < end.at:
        rest = f" and before {a}'s next write at {again.label} and commit at {end.label}: a state no committed transaction left"
    else:
        rest = f" and before {a}'s commit at {end.label}"
    cause = (
        f"{read.session} read {_named(read, write)} at {read.label} under READ UNCOMMITTED, after {a}'s write at "
        f"{write.label}{rest}."
    )
    return Explanation("dirty read", cause)


def _committed(done: Done) -> str:
    if done.txn is None:
        return f"{done.session}'s autocommitted statement at {done.label}"
    return f"{done.session}'s commit at {done.label}"


def _text(value: str | None) -> str:
    return "NULL" if value is None else value
