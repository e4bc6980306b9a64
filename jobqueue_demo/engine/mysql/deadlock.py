"""The deadlock a 1213 broke, read from SHOW ENGINE INNODB STATUS as a cycle.

The server keeps only its latest deadlock, in the monitor's LATEST DETECTED DEADLOCK
section: each transaction of the cycle, its statement, the lock it waited for and (in the
lock conflicting with that wait) what the next one held, then which one was rolled back.
MariaDB 10.6+ lists, under each transaction, "*** WAITING FOR THIS LOCK TO BE GRANTED:"
and "*** CONFLICTING WITH:" (the locks of others, with their trx ids). MySQL 8 lists
"*** (N) HOLDS THE LOCK(S):" and "*** (N) WAITING FOR THIS LOCK TO BE GRANTED:" instead;
that form is written from the MySQL 8.4 manual and not run here (no MySQL server can be
installed on this machine).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..types import WHOLE_TABLE, DeadlockCycle, Lock, Party, names_on, shown, split
from .control import text
from .waits import THREAD_ID, innodb_lock_kind

SECTION = re.compile(r"^-+\nLATEST DETECTED DEADLOCK\n-+\n(.*?)(?=^-+\n[A-Z][A-Z /]*\n-+\n|\Z)", re.MULTILINE | re.DOTALL)
TRANSACTION = re.compile(r"^\*\*\* \((\d+)\) TRANSACTION:\n", re.MULTILINE)
PART = re.compile(r"^\*\*\* (?:\(\d+\) )?(HOLDS THE LOCK\(S\)|WAITING FOR THIS LOCK TO BE GRANTED|CONFLICTING WITH):\n", re.MULTILINE)
TRX_ID = re.compile(r"^TRANSACTION (\d+),", re.MULTILINE)
VICTIM = re.compile(r"^\*\*\* WE ROLL BACK TRANSACTION \((\d+)\)", re.MULTILINE)
RECORD_LOCK = re.compile(
    r"^RECORD LOCKS space id (\d+) page no (\d+) n bits \d+ index `?([^`\s]+)`? of table `([^`]*)`\.`([^`]*)`"
    r".*? trx id (\d+) lock[ _]mode (\S+)(.*)$",
    re.MULTILINE,
)
TABLE_LOCK = re.compile(r"^TABLE LOCK table `([^`]*)`\.`([^`]*)`.*? trx id (\d+) lock mode (\S+)(.*)$", re.MULTILINE)
HEAP_NO = re.compile(r"heap no (\d+) PHYSICAL RECORD: n_fields \d+;[^\n]*\n\s*0: (?:len \d+; hex ([0-9a-f]+)|SQL NULL)", re.MULTILINE)
INFIMUM_SUPREMUM = {"696e66696d756d00": "infimum", "73757072656d756d": "supremum"}

def latest_deadlock(status: str, key_types: Mapping[tuple[str, str], str] | None = None) -> DeadlockCycle | None:
    """The LATEST DETECTED DEADLOCK of a monitor text; None when it has none or it cannot be read.

    `key_types`: (table, index) -> the SQL type of the index's first column, to show a
    record's key as its value (InnoDB prints it as stored bytes).
    """
    found = SECTION.search(status)
    if not found:
        return None
    section = found.group(1)
    victim = VICTIM.search(section)
    heads = list(TRANSACTION.finditer(section))
    if victim is None or len(heads) < 2:
        return None
    types = key_types or {}
    blocks = []
    for head, after in zip(heads, heads[1:] + [None]):
        end = after.start() if after else victim.start()
        blocks.append((int(head.group(1)), section[head.end():end]))
    raw = [_party(number, block, types) for number, block in blocks]
    if any(p is None for p in raw):
        return None
    return DeadlockCycle(_link(raw), int(victim.group(1)))


@dataclass(frozen=True)
class _Raw:
    number: int
    trx_id: str
    thread_id: int
    statement: str
    waits_for: Lock | None
    holds: tuple[Lock, ...]  # MySQL: its own locks; MariaDB: none (they are told under the waiter)
    conflicting: tuple[Lock, ...]  # MariaDB: others' locks in the way of its wait


def _party(number: int, block: str, types: Mapping) -> _Raw | None:
    trx_id, thread = TRX_ID.search(block), THREAD_ID.search(block)
    if trx_id is None or thread is None:
        return None
    parts = list(PART.finditer(block))
    header = block[: parts[0].start() if parts else len(block)]
    statement = header[header.find("\n", thread.end()) + 1:].strip()
    sections: dict[str, tuple[Lock, ...]] = {}
    for part, after in zip(parts, parts[1:] + [None]):
        text = block[part.end(): after.start() if after else len(block)]
        sections[part.group(1)] = _locks(text, types)
    waits = sections.get("WAITING FOR THIS LOCK TO BE GRANTED", ())
    return _Raw(number, trx_id.group(1), int(thread.group(1)), statement, waits[0] if waits else None,
                sections.get("HOLDS THE LOCK(S)", ()), sections.get("CONFLICTING WITH", ()))


def _link(raw: list[_Raw]) -> tuple[Party, ...]:
    """Who blocks whom, and the lock each holds that its waiter wants."""
    by_trx = {r.trx_id: r for r in raw}
    blocked_by: dict[int, int] = {}
    held: dict[int, Lock] = {}
    for i, r in enumerate(raw):
        holder, lock = _holder(r, raw, by_trx)
        if holder is None:
            # Both servers print a cycle in its order: each waits for the next.
            holder = raw[(i + 1) % len(raw)]
        blocked_by[r.number] = holder.number
        if lock is not None:
            held.setdefault(holder.number, lock)
    return tuple(
        Party(r.number, r.thread_id, r.statement, r.waits_for, held.get(r.number), blocked_by.get(r.number)) for r in raw
    )


def _holder(waiter: _Raw, raw: list[_Raw], by_trx: dict[str, _Raw]) -> tuple[_Raw | None, Lock | None]:
    for lock in waiter.conflicting:  # MariaDB: the conflicting lock names its transaction
        if lock.trx_id != waiter.trx_id and lock.trx_id in by_trx:
            return by_trx[lock.trx_id], lock
    wanted = waiter.waits_for
    for other in raw:  # MySQL: a lock the other holds on the same record or table
        if other is waiter or wanted is None:
            continue
        for lock in other.holds:
            if lock.where == wanted.where and (lock.table, lock.index) == (wanted.table, wanted.index):
                return other, lock
    return None, None


def _locks(text: str, types: Mapping) -> tuple[Lock, ...]:
    out = []
    starts = sorted([m for m in RECORD_LOCK.finditer(text)] + [m for m in TABLE_LOCK.finditer(text)], key=lambda m: m.start())
    for match, after in zip(starts, starts[1:] + [None]):
        body = text[match.end(): after.start() if after else len(text)]
        if match.re is TABLE_LOCK:
            table, trx, mode = match.group(2), match.group(3), match.group(4)
            out.append(Lock(table, "", mode, WHOLE_TABLE, trx_id=trx, where=(table,)))
            continue
        space, page, index, _, table, trx, mode, flags = match.groups()
        heap = HEAP_NO.search(body)
        record = _key(heap.group(2), types.get((table, index), "")) if heap else ""
        where = (space, page, heap.group(1) if heap else "")
        out.append(Lock(table, index, mode, innodb_lock_kind(flags, record == "supremum"), record, trx, where))
    return tuple(out)


INTEGER_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}
TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")


def _key(hexed: str | None, column_type: str) -> str:
    """A record's first field as its value: InnoDB stores a signed integer with its sign
    bit flipped, so the bytes of 1 read 80000001."""
    if hexed is None:
        return "NULL"
    if hexed in INFIMUM_SUPREMUM:
        return INFIMUM_SUPREMUM[hexed]
    base = column_type.split("(")[0].split()[0].lower() if column_type else ""
    raw = bytes.fromhex(hexed)
    if base in INTEGER_BITS and len(raw) * 8 == INTEGER_BITS[base]:
        value = int.from_bytes(raw, "big")
        return str(value if "unsigned" in column_type.lower() else value - (1 << (len(raw) * 8 - 1)))
    if base in TEXT_TYPES:
        return "'" + shown(raw.decode("utf-8", "replace").rstrip(" ")) + "'"  # the scenario's data
    return "0x" + hexed


def read_deadlock(monitor, database: str, sessions: Mapping[int, str], victim: int) -> DeadlockCycle | None:
    """The deadlock that just rolled back thread `victim`, its parties named by `sessions`
    (thread id -> session); None when the server's latest deadlock is another one (on a
    shared server, another client's) or its text cannot be read. On a cluster it is read on
    the victim's node, whose own thread ids the cycle's parties then carry."""
    node, thread_id = split(victim)
    monitor = dict(monitor.by_node())[node]
    rows = monitor.rows("SHOW ENGINE INNODB STATUS")
    found = latest_deadlock(text(rows[0][2]) if rows else "", _key_types(monitor, database))
    if found is None or found.party(found.victim) is None or found.party(found.victim).thread_id != thread_id:
        return None
    return found.named(names_on(node, sessions))


def _key_types(monitor, database: str) -> dict[tuple[str, str], str]:
    """(table, index) -> the type of the index's first column, in the scratch database.
    Two queries joined here: joined in SQL, information_schema reads every schema's
    columns (26 ms against 0.4 ms, measured on the development machine's shared server)."""
    escaped = database.replace("'", "''")
    firsts = monitor.rows(
        "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
        f"WHERE TABLE_SCHEMA = '{escaped}' AND SEQ_IN_INDEX = 1"
    )
    types = {
        (text(t), text(c)): text(k)
        for t, c, k in monitor.rows(
            f"SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{escaped}'"
        )
    }
    return {(text(t), text(i)): types.get((text(t), text(c)), "") for t, i, c in firsts}
