"""The scenario model: what a YAML lesson says, checked and typed, with source lines kept."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..engine import mysql_errors

# As scenarios spell them; each engine's dialect turns one into its server's setting.
ISOLATION_LEVELS = ("read-uncommitted", "read-committed", "repeatable-read", "serializable")

# `:claimed` in a statement: the value an earlier statement of the same session captured.
CAPTURE_REF = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
FAULT_ACTIONS = ("kill", "disconnect", "kill-query", "reconnect", "wait")
# When an invariant must hold: after every schedule, or only after those without an injected fault.
INVARIANT_HOLDS = ("always", "without-faults")


@dataclass(frozen=True)
class Span:
    """Character offsets in the source text, so `record` can rewrite one step in place."""

    start: int
    end: int


@dataclass(frozen=True)
class SessionSpec:
    name: str
    isolation: str | None = None  # one of ISOLATION_LEVELS
    innodb_lock_wait_timeout: int | None = None
    lock_wait_timeout: int | None = None
    node: int | None = None  # the cluster node it connects to, from 1 (cluster lessons)
    wsrep_sync_wait: int | None = None  # Galera: wait for the cluster before reads (0: never)


@dataclass(frozen=True)
class ErrorMatch:
    """An expected error by number, by name (ER_LOCK_DEADLOCK) or by portable class."""

    spelling: str
    errnos: frozenset[int]

    def matches(self, errno: int) -> bool:
        return errno in self.errnos


@dataclass(frozen=True)
class Expectation:
    ok: bool = False
    columns: tuple[str, ...] | None = None
    rows: tuple[tuple[str | None, ...], ...] | None = None
    affected: int | None = None
    error: ErrorMatch | None = None
    waits: bool | None = None


@dataclass(frozen=True)
class Statement:
    session: str
    sql: str
    line: int
    comment: str | None = None
    expect: Expectation | None = None
    capture: str | None = None
    span: Span | None = field(default=None, compare=False)
    expect_span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Narration:
    text: str
    line: int


@dataclass(frozen=True)
class Fault:
    action: str  # one of FAULT_ACTIONS
    session: str
    line: int


@dataclass(frozen=True)
class Locks:
    line: int


Step = Statement | Narration | Fault | Locks


@dataclass(frozen=True)
class Invariant:
    name: str
    sql: str
    expect: tuple[tuple[str | None, ...], ...]
    line: int
    holds: str = "always"  # one of INVARIANT_HOLDS


@dataclass(frozen=True)
class Scenario:
    path: str
    title: str
    sessions: tuple[SessionSpec, ...]
    steps: tuple[Step, ...]
    setup: str = ""
    summary: str = ""
    description: str = ""
    why: str = ""
    verified: str | None = None
    invariants: tuple[Invariant, ...] = ()
    explore: str | None = None  # the lesson written for `explore`, next to this one
    cluster: int | None = None  # the Galera nodes it needs; None: a single server
    source: str = field(default="", repr=False, compare=False)

    @property
    def session_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sessions)

    @property
    def prompts(self) -> dict[str, str]:
        """How a transcript names each session: `A@1` on a cluster's node 1, else its name."""
        return {s.name: f"{s.name}@{s.node}" if s.node else s.name for s in self.sessions}

    def statements(self) -> list[tuple[int, Statement]]:
        return [(i, s) for i, s in enumerate(self.steps) if isinstance(s, Statement)]


def error_match(spelling: str | int) -> ErrorMatch:
    """Resolve 1205, 'ER_LOCK_DEADLOCK' or 'lock-not-available'; KeyError when unknown."""
    if isinstance(spelling, int):
        return ErrorMatch(str(spelling), frozenset({spelling}))
    text = spelling.strip()
    if text.isdigit():
        return ErrorMatch(text, frozenset({int(text)}))
    return ErrorMatch(text, mysql_errors.resolve(text))
