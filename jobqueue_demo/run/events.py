"""What a run produces, in the order it happened; renderers and checks consume these.

Plain dataclasses, not frozen, and compared by identity (eq=False): an event is made once and
only read, and nothing hashes one or compares two. Each generated method is compiled from
source when the class is defined, on every run's start-up, and a frozen dataclass costs about
twice a plain one (docs/architecture.md, Start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.types import ASKED_ONLY as ASKED_ONLY
from ..engine.types import HOLDS as HOLDS  # how a Blocker blocks: the views read these two
from ..engine.types import QUEUED as QUEUED
from ..engine.types import Plain, Result
from ..scenario.model import Step

if TYPE_CHECKING:  # only a deadlock or a stuck run makes these; a run without one never imports them
    from ..engine.types import DeadlockCycle
    from .chain import WaitChain


@dataclass(eq=False)
class RunStarted:
    """The scratch database is ready and the first step is next."""

    title: str
    server: str  # e.g. "MariaDB 10.11.19"
    database: str


@dataclass(eq=False)
class StepStarting:
    """Emitted before each step runs, so an interactive view can pause on it."""

    index: int
    step: Step


@dataclass(eq=False)
class Narrated:
    """A narration step: the lesson's prose between statements."""

    index: int
    text: str


@dataclass(eq=False)
class Blocker:
    """One session in a waiting statement's way, and how."""

    session: str
    how: str  # HOLDS (a conflicting lock) or QUEUED (its own request, still waiting, is ahead)
    mode: str = ""  # the mode it holds, or, queued ahead, the mode it asks for; "" when not told
    statement: str = ""  # queued ahead: what its waiting request is, e.g. "LOCK TABLES"
    waits_for: tuple[str, ...] = ()  # queued ahead: whom its own request waits for


@dataclass(eq=False)
class Waiting:
    """A statement the server holds on a lock; its Completed event comes later."""

    index: int
    session: str
    sql: str
    comment: str | None
    at_ms: float
    kind: str  # row lock, gap lock, insert intention lock, metadata lock, table lock, advisory lock...
    blockers: tuple[str, ...]  # every session of `edges`, holders and queued ahead alike
    lock: str = ""  # what is locked (with `requested` empty, the mode too: "jobs PRIMARY X")
    edges: tuple[Blocker, ...] = ()
    requested: str = ""  # the mode this statement asks for, when the server tells it apart


@dataclass(eq=False)
class Completed:
    """A statement's answer: its rows, count or error, after a wait when waited_ms is set."""

    index: int
    session: str
    sql: str
    comment: str | None
    result: Result
    at_ms: float
    waited_ms: float | None = None  # set when this completes an earlier Waiting
    blockers: tuple[str, ...] = ()
    deadlock: DeadlockCycle | None = None  # the cycle a 1213 broke, as the server told it
    # On a Galera node, what a 1213 was (engine/galera/node.py: "deadlock", "certification
    # failure", "brute-force abort"), told by the node's counters; None on one server.
    rollback: str | None = None


@dataclass(eq=False)
class FaultApplied:
    """A fault step done to a session: `action` is one of scenario/fault_kinds.py's kinds."""

    index: int
    action: str
    session: str
    at_ms: float
    detail: str
    took_ms: float | None = None
    call: str = ""  # what a kill was done with: KILL CONNECTION, pg_terminate_backend...


@dataclass(eq=False)
class LocksShown:
    """A `locks` step: the sessions' locks as the server lists them, and what it cannot list."""

    index: int
    columns: tuple[str, ...]
    rows: tuple[tuple[str | None, ...], ...]
    note: str


@dataclass(eq=False)
class LocksTaken:
    """With --show-locks: the record locks a statement added to its transaction's."""

    index: int
    session: str
    returned: int | None  # rows read or changed; None when the statement failed
    read: bool  # a result set (returned rows) rather than a write (changed rows)
    locked: int  # record locks this statement added
    held: int  # record locks the transaction holds now


@dataclass(eq=False)
class Stuck:
    """The schedule cannot go on; the run ends with StuckError right after this event."""

    index: int
    what: str  # e.g. "C's next statement cannot be sent"
    chain: WaitChain


# A spec step told waiting by its permutation's annotation (`(*)`, a blocking step), not by a lock.
ANNOTATED = "annotation"


# A spec's own events, as plain classes: only a spec's run makes them, and every run defines
# this module (engine/types.py's Plain says what a dataclass costs there).
class PermutationStarting(Plain):
    """An isolation spec's permutation begins: its setup runs next (run/spec_run.py)."""

    __slots__ = ("steps",)

    def __init__(self, steps: tuple[str, ...]):
        self.steps = steps


class ScriptAnswered(Plain):
    """A spec's setup or teardown block answered; `session` None for the global ones."""

    __slots__ = ("what", "session", "result")

    def __init__(self, what: str, session: str | None, result: Result):
        self.what = what  # "setup" or "teardown"
        self.session = session
        self.result = result


class Noticed(Plain):
    """Notices a spec's session received while its statement ran, before its answer was read."""

    __slots__ = ("session", "lines")

    def __init__(self, session: str, lines: tuple[str, ...]):
        self.session = session
        self.lines = lines


class Notified(Plain):
    """A NOTIFY a spec's session received, read after its step's answer (LISTEN ...)."""

    __slots__ = ("session", "channel", "payload", "sender")

    def __init__(self, session: str, channel: str, payload: str, sender: str):
        self.session = session
        self.channel = channel
        self.payload = payload
        self.sender = sender  # the sending session's name, or "PID n" for a connection not the run's


class StepCanceled(Plain):
    """A spec's step still running after the step timeout was cancelled, as isolationtester
    cancels one after its max_step_wait; its answer (the cancel's error) is read as usual."""

    __slots__ = ("session", "step", "seconds")

    def __init__(self, session: str, step: str, seconds: int):
        self.session = session
        self.step = step
        self.seconds = seconds


class Checked(Plain):
    """A spec's `#@invariant`s, run after a permutation's steps (explore): (Invariant, Result) pairs."""

    __slots__ = ("results",)

    def __init__(self, results: tuple):
        self.results = results


class PermutationStuck(Plain):
    """A permutation explore ran ended with steps that never completed; its sessions were ended."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message


@dataclass(eq=False)
class RunFinished:
    """Every step has run and every statement has answered; the sessions close next."""

    elapsed_ms: float


Event = (
    RunStarted | StepStarting | Narrated | Waiting | Completed | FaultApplied | LocksShown | LocksTaken | Stuck
    | PermutationStarting | ScriptAnswered | Noticed | Notified | StepCanceled | Checked | PermutationStuck | RunFinished
)
