"""Naming what went wrong in a counterexample, from what its schedule did.

The schedule's own record is read, not the scenario's title: which statement read which
captured value, which later statement used it, when each transaction committed. Two
patterns are named, in the terms of Adya's and hermitage's catalogues:

- lost update (P4): two sessions read the same captured value, one of them before the
  other's commit, and both then committed a write that used it. Where the value goes in the
  second write names the case: written (an overwrite), or only picking the row (in a queue,
  a double claim: both took the same job);
- non-repeatable read (P2): one transaction ran the same read twice and got different
  rows, with another session's commit in between.

Anything else gets no sentence rather than a guessed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..engine import mysql_errors
from ..run import events as ev
from ..scenario.model import CAPTURE_REF, Statement

BEGINS = re.compile(r"^\s*(BEGIN|START\s+TRANSACTION)\b", re.IGNORECASE)
ENDS = re.compile(r"^\s*(COMMIT|ROLLBACK)\b", re.IGNORECASE)
READS = re.compile(r"^\s*(SELECT|WITH)\b", re.IGNORECASE)
WHERE = re.compile(r"\bWHERE\b", re.IGNORECASE)
UPDATES = re.compile(r"^\s*UPDATE\b", re.IGNORECASE)


@dataclass(frozen=True)
class Explanation:
    anomaly: str  # e.g. "lost update (a double claim)"
    cause: str  # the steps that cause it, by their schedule labels


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
    return _lost_updates(done, commits) + _non_repeatable(done, commits)


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
        if ENDS.match(event.sql) or (error is not None and error.errno == mysql_errors.ER_LOCK_DEADLOCK):
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


def _lost_updates(done: list[Done], commits) -> list[Explanation]:
    committed = [c for c in _chains(done) if _txn_key(c.write) in commits]
    out, told = [], set()
    for first in committed:
        first_commit = commits[_txn_key(first.write)]
        for second in committed:
            second_commit = commits[_txn_key(second.write)]
            if second.read.session == first.read.session or second.value != first.value:
                continue
            if not (second.read.at < first_commit.at < second_commit.at):
                continue
            key = (first.write.session, second.write.session, first.name, first.value)
            if key in told:
                continue
            told.add(key)
            out.append(_lost_update(first, second, first_commit, second_commit))
    return out


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


def _committed(done: Done) -> str:
    if done.txn is None:
        return f"{done.session}'s autocommitted statement at {done.label}"
    return f"{done.session}'s commit at {done.label}"


def _text(value: str | None) -> str:
    return "NULL" if value is None else value
