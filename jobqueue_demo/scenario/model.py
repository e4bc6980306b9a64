"""The scenario model: what a YAML lesson says, checked and typed, with source lines kept.

Made by the loader, one per engine the lesson is written for, and only read after; nothing
hashes one. Plain dataclasses, not frozen: a frozen one costs about twice as much to define,
on every run's start-up (docs/architecture.md, Start-up)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath

from ..engine.seam import DEFAULT_ENGINE, seam_of
from ..errors import UsageError
from .fault_kinds import WAIT

# A lesson that names no engines was written for MariaDB/MySQL, as every lesson was before.
DEFAULT_ENGINES = (DEFAULT_ENGINE,)

# As scenarios spell them; each engine's dialect turns one into its server's setting.
ISOLATION_LEVELS = ("read-uncommitted", "read-committed", "repeatable-read", "serializable")

# `:claimed` in a statement: the value an earlier statement of the same session captured.
CAPTURE_REF = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
# When an invariant must hold: after every schedule, or only after those without an injected fault.
INVARIANT_HOLDS = ("always", "without-faults")


@dataclass(eq=False)
class Span:
    """Character offsets in the source text, so `record` can rewrite one step in place."""

    start: int
    end: int


@dataclass
class SessionSpec:
    """A session the lesson names, and the settings it connects with."""

    name: str
    isolation: str | None = None  # one of ISOLATION_LEVELS
    innodb_lock_wait_timeout: int | None = None
    lock_wait_timeout: int | None = None
    node: int | None = None  # the cluster node it connects to, from 1 (cluster lessons)
    wsrep_sync_wait: int | None = None  # Galera: wait for the cluster before reads (0: never)


@dataclass
class ErrorMatch:
    """An expected error, resolved for one engine into its codes: MySQL numbers (by number,
    by name such as ER_LOCK_DEADLOCK, or by portable class) or PostgreSQL SQLSTATEs (by code,
    condition name or portable class). Matched against an error's own `code`: a MySQL error
    also carries a SQLSTATE (1213 is 40001), which must not match a PostgreSQL expectation."""

    spelling: str
    codes: frozenset[int | str] = frozenset()

    def matches(self, error) -> bool:
        """`error`: the SqlError a statement returned."""
        return error.code in self.codes


@dataclass
class Expectation:
    """What a statement's `expect:` holds it to; a part left None is not checked."""

    ok: bool = False
    columns: tuple[str, ...] | None = None
    rows: tuple[tuple[str | None, ...], ...] | None = None
    affected: int | None = None
    error: ErrorMatch | None = None
    waits: bool | None = None


@dataclass
class Statement:
    """SQL one session sends, as the lesson wrote it for this engine."""

    session: str
    sql: str
    line: int
    comment: str | None = None
    expect: Expectation | None = None
    capture: str | None = None
    span: Span | None = field(default=None, compare=False)
    expect_span: Span | None = field(default=None, compare=False)
    # For `record` in a lesson for several engines: the other engines' expectations (None:
    # none written), and whether `expect` was written once for every engine.
    expect_others: tuple[tuple[str, Expectation | None], ...] = field(default=(), compare=False)
    expect_shared: bool = field(default=True, compare=False)
    # A step the tool adds that touches only tables of its own (explore --queue's record of a
    # job): it commutes with every other session's step, so explore runs it together with
    # the session's step before it, as one move, and the space does not grow by it.
    glued: bool = False


@dataclass
class Narration:
    """The lesson's prose between statements."""

    text: str
    line: int


@dataclass
class Fault:
    """A fault done to a session: a step of one of the kinds scenarios write (fault_kinds.py)."""

    action: str  # one of fault_kinds.STEP_FAULTS
    session: str
    line: int


@dataclass
class Locks:
    """A `locks` step: a table of the sessions' current locks."""

    line: int


Step = Statement | Narration | Fault | Locks


def one_line(sql: str, limit: int) -> str:
    """A statement on one line of at most `limit` characters: when longer, cut after a whole
    word and marked, since a cut word reads as another value (`VALUES ('send pa`)."""
    text = " ".join(sql.split())
    if len(text) <= limit:
        return text
    head = text[: limit - 3]
    return (head[: head.rfind(" ")] if " " in head else head) + " ..."


def is_wait(step: Step) -> bool:
    """A `wait:` step: it sends nothing, it lets the session's statement end on its own."""
    return isinstance(step, Fault) and step.action == WAIT.name


@dataclass
class Invariant:
    """A check `explore` runs after a schedule: `sql` must return `expect`."""

    name: str
    sql: str
    expect: tuple[tuple[str | None, ...], ...]
    line: int
    holds: str = "always"  # one of INVARIANT_HOLDS


@dataclass
class Scenario:
    """A lesson, resolved for one engine, with the variants for its other engines."""

    path: str
    title: str
    sessions: tuple[SessionSpec, ...]
    steps: tuple[Step, ...]
    setup: str = ""
    summary: str = ""
    description: str = ""
    why: str = ""
    verified: str | None = None  # this engine's stamp
    invariants: tuple[Invariant, ...] = ()
    explore: str | None = None  # the lesson written for `explore`, next to this one
    cluster: int | None = None  # the Galera nodes it needs; None: a single server
    source: str = field(default="", repr=False, compare=False)
    engine: str = DEFAULT_ENGINE  # the engine this scenario is resolved for
    engines: tuple[str, ...] = DEFAULT_ENGINES  # every engine the lesson is written for
    stamps: tuple[tuple[str, str], ...] = ()  # (engine, "MariaDB 10.11.19 on 2026-12-03"), every engine's
    verified_span: Span | None = field(default=None, compare=False)
    # The lesson resolved for each of its engines (loader.py fills it; shared by all of them).
    variants: dict = field(default_factory=dict, repr=False, compare=False)
    # A PostgreSQL isolation spec's parse (scenario/spec.py), run permutation by permutation.
    spec: object | None = field(default=None, repr=False, compare=False)
    # explore --queue's scenario: its invariants read the tool's record (jqd_...), which explore
    # first checks against what the sessions committed (explore/tool_record.py).
    tool_record: bool = False

    @property
    def session_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sessions)

    @property
    def prompts(self) -> dict[str, str]:
        """How a transcript names each session: `A@1` on a cluster's node 1, else its name."""
        return {s.name: f"{s.name}@{s.node}" if s.node else s.name for s in self.sessions}

    def statements(self) -> list[tuple[int, Statement]]:
        return [(i, s) for i, s in enumerate(self.steps) if isinstance(s, Statement)]

    @property
    def verified_text(self) -> str:
        """Every engine's stamp, as `lessons` and `show` print them."""
        return "; ".join(stamp for _, stamp in self.stamps) or "not recorded"

    @property
    def name(self) -> str:
        """The file's name without .yaml: a shipped lesson's name."""
        return PurePath(self.path).stem

    def for_engine(self, engine: str) -> Scenario:
        """This lesson as written for `engine`: plain SQL, expectations and narration, no
        per-engine mappings left; UsageError when the lesson is not written for it."""
        if engine == self.engine:
            return self
        if engine not in self.variants:
            raise UsageError(
                f"{self.name}: written for {' and '.join(self.engines)} only; engines: [{', '.join(self.engines)}]"
                f" (this server is {engine})"
            )
        return self.variants[engine]


def error_match(spelling: str | int, engine: str = DEFAULT_ENGINE) -> ErrorMatch:
    """Resolve an expected error for `engine`: 1205, ER_LOCK_DEADLOCK, 55P03, lock_not_available
    or a portable class such as lock-not-available; KeyError when it means nothing there."""
    text = str(spelling).strip()
    return ErrorMatch(text, codes=seam_of(engine).errors.resolve(text))


def error_spelling(error, portable: bool) -> str:
    """How `record` writes an error (engine/types.py's SqlError, as each engine makes it): its portable
    class where it has one and the lesson is shared by engines, or the servers of one engine
    differ (1205 vs 3572); else its name, else its code."""
    if error.error_class and (portable or error.error_class in DIFFERING_CLASSES):
        return error.error_class
    return error.name or str(error.code)


# The classes whose numbers differ between MariaDB and MySQL 8.4, recorded by class even in
# a lesson for one engine.
DIFFERING_CLASSES = ("lock-not-available", "connection-lost")
