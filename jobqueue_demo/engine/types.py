"""The values every engine hands up: what a statement returned, what a session waits for, a
deadlock's cycle, the server a run is on. Imports nothing else of engine/, so the layers above
and every engine package may import it without tying themselves to one engine."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ServerError

if TYPE_CHECKING:  # for annotations only: the seam's Protocols are made of these values
    from .seam import ConnectParams, Dialect, Engine

# What a terminal acts on instead of showing: C0 controls but tab and newline, DEL, C1.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """Server text (an error's message, a notice) with its control characters written out, as
    a value's are (render/table.py): scenario SQL chooses it (RAISE ... chr(27) || ...)."""
    return _CONTROL.sub(_written_out, text)


def _written_out(found: re.Match) -> str:
    c = found.group()
    if c == "\r":
        return "\\r"
    return f"\\x{ord(c):02X}" if c < "\x80" else f"\\u{ord(c):04X}"


# Plain, not frozen (as run/events.py): made once per statement, then only read; nothing hashes one.
@dataclass(eq=False)
class SqlError(ABC):
    """An error the server answered a statement with. Each engine says how its client prints
    it and what `code` expectations match: MySQL's number, PostgreSQL's SQLSTATE."""

    errno: int  # 0 where the engine numbers no errors
    sqlstate: str
    message: str

    @abstractmethod
    def __str__(self) -> str: ...

    @property
    @abstractmethod
    def code(self) -> int | str: ...

    @property
    @abstractmethod
    def error_class(self) -> str | None:
        """The portable class (`deadlock`, `lock-not-available`, ...), or None."""

    @property
    @abstractmethod
    def name(self) -> str | None:
        """The code's name (ER_LOCK_DEADLOCK, LOCK_NOT_AVAILABLE), when the tool knows it."""

    @property
    def statement_only(self) -> bool:
        """Whether the server rolled back this statement alone, its transaction still open
        (MySQL's lock wait timeout); after any other error a transaction is rolled back or,
        on PostgreSQL, aborted until ROLLBACK."""
        return False


# How a value cut to caps.MAX_VALUE_BYTES ends: its first bytes, then this.
CUT_MARK = "… ({} bytes more)"
CUT = re.compile(r"… \((\d+) bytes more\)\Z")


@dataclass(eq=False)
class Result:
    """A result set (columns is not None), an OK with an affected count, or an error.

    Values are the server's text form (None for NULL), so what is shown and what is
    compared with expectations is exactly what the server sent.
    """

    columns: tuple[str, ...] | None = None
    numeric: tuple[bool, ...] = ()
    rows: tuple[tuple[str | None, ...], ...] = ()
    # Rows the server sent beyond the ones kept (caps.py), counted, not stored; `capped`: the
    # kept ones reached caps.MAX_RESULT_BYTES; `cut`: values cut to caps.MAX_VALUE_BYTES.
    omitted: int = 0
    capped: bool = False
    cut: int = 0
    affected: int | None = None
    error: SqlError | None = None
    warnings: int = 0
    elapsed_ms: float = field(default=0.0, compare=False)
    # Rows an UPDATE matched, changed or not: a lost update may write the value already there
    # (affected 0), and anomaly.py must still see the write.
    matched: int | None = field(default=None, compare=False)
    # PostgreSQL's command tag (`BEGIN`, `UPDATE 1`, `ROLLBACK` for a COMMIT of an aborted
    # transaction), which psql prints where mysql says Query OK; None on MySQL.
    tag: str | None = None
    # Notices and warnings that arrived with the statement, in psql's form (`WARNING:  ...`).
    notices: tuple[str, ...] = ()
    # A step of several statements (PostgreSQL's simple query): the results before this one,
    # which is the last statement's or the first error, the one expectations are checked against.
    earlier: tuple[Result, ...] = ()
    # PostgreSQL's answer to SQL of nothing but spaces and comments (EMPTY_QUERY): isolationtester
    # takes it for a failed setup or teardown block.
    empty: bool = field(default=False, compare=False)

    @property
    def is_rows(self) -> bool:
        return self.columns is not None

    def cut_short(self, value: str | None) -> bool:
        """Whether `value`, one of this result's, is only the start of what the server sent."""
        return bool(self.cut) and value is not None and CUT.search(value) is not None

    @property
    def whole(self) -> bool:
        """Every row and every value as the server sent it: nothing left out or cut."""
        return not (self.omitted or self.cut)


# What a session waits for, as transcripts and the lock table name it. A gap or an insert
# intention holds no row; a record or next-key lock does: both are a row lock.
ROW = "row lock"
METADATA = "metadata lock"
TABLE = "table lock"
GAP = "gap lock"
INSERT_INTENTION = "insert intention lock"
ADVISORY = "advisory lock"
ROW_KINDS = (ROW, GAP, INSERT_INTENTION)
# Kinds only a waiter asks for: what blocks it is another kind of lock on the same gap.
ASKED_ONLY = (GAP, INSERT_INTENTION)

# How a blocker stands in the waiter's way: it holds a conflicting lock, or its own request,
# still waiting, is ahead in the queue and the waiter may not overtake it.
HOLDS, QUEUED = "holds", "queued ahead"

# A lock's kind as a deadlock report names it (a Lock's `kind`): InnoDB's record, next-key,
# gap and insert intention locks, and a lock on a whole table.
RECORD, NEXT_KEY, GAP_ONLY, INSERT_INTENTION_ONLY = "record", "next-key", "gap", "insert intention"
WHOLE_TABLE = "table"


@dataclass(eq=False)
class Edge:
    """One blocker of a wait: its thread, how it blocks, and the mode it holds (or, queued, asks)."""

    thread: int
    how: str  # HOLDS or QUEUED
    mode: str = ""  # "" when the server does not say, or says nothing a lesson can use


# Plain, not frozen (as run/events.py): read once where they are made, never hashed.
@dataclass(eq=False)
class WaitInfo:
    """What a blocked session waits for, and who holds it."""

    kind: str  # one of ROW_KINDS, METADATA, TABLE, ADVISORY
    blockers: tuple[int, ...]  # thread ids holding what is waited for, when the server tells
    lock: str = ""  # e.g. "jobs PRIMARY X (1)"; with `requested` set, what is locked only ("jobs")
    edges: tuple[Edge, ...] = ()  # each blocker's edge, when the server tells holders from queued requests
    requested: str = ""  # the mode the waiter asks for, when told apart from the lock

    def __post_init__(self):
        if self.edges:
            self.blockers = tuple(e.thread for e in self.edges)
        elif self.blockers:
            self.edges = tuple(Edge(t, HOLDS) for t in self.blockers)


@dataclass(eq=False)
class TrxStatus:
    """A client's transaction, as SHOW ENGINE INNODB STATUS lists it."""

    active: bool
    lock_wait: bool
    waiting_for: str = ""  # e.g. "jobs PRIMARY X", from the lock it waits for
    waiting_kind: str = ROW  # which of ROW_KINDS that lock is



class Plain:
    """A value made once and only read after, nothing comparing or hashing it, as a plain class
    with slots: a dataclass costs about 1.9 M instructions to define on every run's start-up,
    which this module is on, for values most runs never make (docs/architecture.md)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self.__slots__)})"

    def replaced(self, **changes) -> Plain:
        """A copy with `changes`, as dataclasses.replace makes one."""
        return type(self)(**{name: getattr(self, name) for name in self.__slots__} | changes)


class Lock(Plain):
    """One lock of a deadlock report: on a table, or on an index record or the gap before it."""

    __slots__ = ("table", "index", "mode", "kind", "record", "trx_id", "where")

    def __init__(
        self, table: str, index: str, mode: str, kind: str, record: str = "", trx_id: str = "", where: tuple = ()
    ):
        self.table = table
        self.index = index  # "" for a table lock
        self.mode = mode  # X, S, IX, IS, AUTO-INC
        self.kind = kind  # RECORD, NEXT_KEY, GAP_ONLY, INSERT_INTENTION_ONLY or WHOLE_TABLE
        self.record = record  # "supremum", or the first key field, e.g. "2" or "'queued'"
        self.trx_id = trx_id
        self.where = where  # space, page, heap no: the same record in two lock lines

    def text(self) -> str:
        """E.g. "X record lock on jobs PRIMARY (2)", "X insert intention lock on jobs PRIMARY before supremum"."""
        if self.kind == WHOLE_TABLE:
            return f"{self.mode} table lock on {self.table}"
        at = ""
        if self.record:
            before = self.kind in (GAP_ONLY, INSERT_INTENTION_ONLY) or self.record == "supremum"
            at = f" {'before ' if before else ''}{self.record if self.record == 'supremum' else f'({self.record})'}"
        return f"{self.mode} {self.kind} lock on {' '.join(filter(None, (self.table, self.index)))}{at}"


class Party(Plain):
    """One transaction of the cycle, in the server's numbering."""

    __slots__ = ("number", "thread_id", "statement", "waits_for", "held", "blocked_by", "session")

    def __init__(
        self, number: int, thread_id: int, statement: str, waits_for: Lock | None, held: Lock | None,
        blocked_by: int | None, session: str = "",
    ):
        self.number = number
        self.thread_id = thread_id
        self.statement = statement
        self.waits_for = waits_for
        self.held = held  # the lock of its own that the previous transaction in the cycle waits for
        self.blocked_by = blocked_by  # the number of the transaction holding what it waits for
        self.session = session  # the scenario's name for it, when it is one of the run's sessions

    def called(self, session: str) -> Party:
        """The same transaction, named `session`."""
        return Party(self.number, self.thread_id, self.statement, self.waits_for, self.held, self.blocked_by, session)


class DeadlockCycle(Plain):
    """The transactions of a deadlock in the order each waited for the next, and its victim."""

    __slots__ = ("parties", "victim")

    def __init__(self, parties: tuple[Party, ...], victim: int):
        self.parties = parties
        self.victim = victim  # the number of the transaction rolled back

    def party(self, number: int | None) -> Party | None:
        return next((p for p in self.parties if p.number == number), None)

    def name(self, number: int | None) -> str:
        party = self.party(number)
        if party is None:
            return "another transaction"
        return party.session or f"thread {party.thread_id}"

    def lines(self) -> list[str]:
        """The cycle in a few lines: who waited for what, held by whom, and who was rolled back."""
        ordered = self._ordered()
        loop = " -> ".join(self.name(p.number) for p in ordered + ordered[:1])
        out = [f"deadlock: {loop}; the server rolled back {self.name(self.victim)}"]
        for p in ordered:
            wanted = p.waits_for.text() if p.waits_for else "a lock the server did not print"
            out.append(f"  {self.name(p.number)} waited for {wanted}, held by {self._held(p.blocked_by)}")
        return out

    def _held(self, number: int | None) -> str:
        holder = self.party(number)
        if holder is None or holder.held is None:
            return self.name(number)
        lock = holder.held
        what = f"{lock.mode} table lock" if lock.kind == WHOLE_TABLE else f"{lock.mode} {lock.kind} lock"
        return f"{self.name(number)} ({what})"

    def _ordered(self) -> list[Party]:
        """Following the cycle from the victim, so the story starts with the one that lost."""
        out: list[Party] = []
        party = self.party(self.victim) or self.parties[0]
        while party is not None and party not in out:
            out.append(party)
            party = self.party(party.blocked_by)
        return out + [p for p in self.parties if p not in out]

    def named(self, sessions: Mapping[int, str]) -> DeadlockCycle:
        return DeadlockCycle(tuple(p.called(sessions.get(p.thread_id, "")) for p in self.parties), self.victim)

    def renamed(self, names: Mapping[str, str]) -> DeadlockCycle:
        """Its sessions as `names` calls them (a transcript's `A@1`)."""
        return DeadlockCycle(tuple(p.called(names.get(p.session, p.session)) for p in self.parties), self.victim)


class Survey(Plain):
    """The scratch database's base tables, or why restoring their rows would not reset it."""

    __slots__ = ("tables", "obstacle")

    def __init__(self, tables: tuple[str, ...], obstacle: str | None):
        self.tables = tables
        self.obstacle = obstacle


COLUMNS = ("session", "table", "index", "mode", "record", "status")


class ControlError(ServerError):
    """A statement of the tool's own that failed; `errno` is the server's error number (a
    SQLSTATE string on PostgreSQL)."""

    def __init__(self, message: str, errno: int | str):
        super().__init__(message)
        self.errno = errno


def first_failure(steps: list, lost: frozenset) -> ControlError | None:
    """Every step tried, for clean-up that should go as far as it can; the first failure, if
    any. Once the connection is lost the rest would fail the same way, so they are not tried."""
    failure = None
    for step in steps:
        try:
            step()
        except ControlError as e:
            failure = failure or e
            if e.errno in lost:
                break
    return failure


# When a run's scratch database and role are dropped: at close (a DSN's server, a test's), or
# with the server itself (an embedded one the command started and deletes a moment later with
# everything on it; PostgreSQL's DROP DATABASE would wait for a checkpoint first).
DROPS_AT_CLOSE, DROPS_WITH_SERVER = "at close", "with the server"


@dataclass(eq=False)
class ServerInfo:
    """The server a command runs on: how to reach it, what it is, and its engine (`seam`)."""

    params: ConnectParams  # how its engine connects (mysql/server.py, postgresql/server.py)
    flavor: str
    version: str
    seam: Engine  # what run/, explore/ and workers/ ask of this server's engine (seam.py)
    embedded: bool = False
    # Scenario SQL runs as the DSN's user instead of a per-run user (--allow-shared-user).
    shared_user: bool = False
    # A Galera cluster's nodes, node 1 first (params is node 1's); empty for one server.
    nodes: tuple[ConnectParams, ...] = ()
    drops: str = DROPS_AT_CLOSE

    @property
    def engine(self) -> str:
        """The registry's name for its engine: what a lesson's per-engine parts are keyed by."""
        return self.seam.name

    @property
    def label(self) -> str:
        return f"{self.flavor} {self.version}"

    @property
    def where(self) -> str:
        # The embedded server's socket path is a random temp name, of no use to a reader.
        if self.nodes:
            return f"embedded {len(self.nodes)}-node Galera cluster" if self.embedded else f"{len(self.nodes)}-node cluster"
        return "embedded throwaway server" if self.embedded else self.params.display()

    @property
    def dialect(self) -> Dialect:
        return self.seam.dialect(self)


# A thread id that carries its cluster node: every node numbers its connections itself, so a
# session on node N > 1 is known to a run by an id of its own (galera/node_waits.py).
# Above any thread id a server hands out (they are 32-bit on MariaDB and MySQL).
NODE_STRIDE = 1 << 40


def on_node(node: int | None, thread_id: int) -> int:
    """The run's id for a thread of `node` (node 1, or no node, keeps the server's id)."""
    return thread_id if node in (None, 1) else node * NODE_STRIDE + thread_id


def split(run_id: int) -> tuple[int, int]:
    """(node, the node's own thread id) of a run's id."""
    node, thread_id = divmod(int(run_id), NODE_STRIDE)
    return node or 1, thread_id


def names_on(node: int, names: Mapping[int, str]) -> dict[int, str]:
    """The run's names (run id -> name) of one node's threads, by that node's own thread ids."""
    out = {}
    for run_id, name in names.items():
        where, thread_id = split(run_id)
        if where == node:
            out[thread_id] = name
    return out


# Why a 1213 rolled a cluster node's transaction back (galera/node.py tells them apart).
BY_DEADLOCK = "deadlock"  # InnoDB broke a cycle of lock waits on this node
BY_CERTIFICATION = "certification failure"  # its write set lost against one certified first
BY_BRUTE_FORCE = "brute-force abort"  # a replicated write set needed its locks and aborted it


CERTIFICATION = "certification failure"  # its write set lost against one certified first


BRUTE_FORCE = "brute-force abort"  # a replicated write set needed its locks and aborted it


# How `state` sorts in the (state, id) index: 'done' after every queued entry (an enum), or
# before them (a string compares 'done' < 'queued'); docs/workers.md says why it matters.
STATE_ORDERS = ("done-last", "done-first")


class ConnectionGone(Exception):
    """A client library's call on a connection failed because the connection is gone (libpq's
    calls on a session's connection: run/spec_run.py drives them directly)."""


class ClaimError(Exception):
    """A statement of a worker failed; `kind` is its portable class, None when no retry helps."""

    def __init__(self, kind: str | None, text: str):
        super().__init__(text)
        self.kind = kind


def as_text(value) -> str:
    """A column as the server sent it (bytes, number or NULL), as text."""
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

