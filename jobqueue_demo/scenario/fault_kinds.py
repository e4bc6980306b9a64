"""The fault kinds: the one list of them, read by the loader, the run, the views and explore.

A fault is done to a session from outside its SQL: a scenario writes one as a step (`kill: B`),
and `explore --faults` puts one in place of any step. Adding a kind is one entry here plus what
does it: for a kind scenarios write, its injector in run/faults.py (INJECTORS) and, when the
server does it, the call each engine's dialect names in FAULT_CALLS; for one they do not, the
statement explore sends instead (`sql`). Names and words only: the scenario layer may not
import run/, so what a fault does lives there.
"""

from __future__ import annotations


class FaultKind:
    """One kind of fault, and what the loader, the views and explore need to know of it.

    A plain class: as a dataclass it cost 1.9 M instructions more on every run's start-up
    (docs/architecture.md, Start-up)."""

    __slots__ = ("name", "told", "sql", "written", "explored", "outside", "drops_socket", "ends")

    def __init__(
        self, name: str, told: str, *, sql: str = "", explored: bool = False, outside: bool = False,
        drops_socket: bool = False, ends: tuple[str, ...] = (),
    ):
        self.name = name  # as a scenario writes its step (`kill: B`) and `explore --faults` takes it
        self.told = told  # what a transcript or the columns say of it: `-- B {told}: ...`, or the comment on `sql`
        self.sql = sql  # a kind no scenario writes: the statement explore sends in the replaced step's place
        self.written = not sql  # a scenario writes it as a step, which run/faults.py's injector does
        self.explored = explored  # `explore --faults` can put it in place of any step
        # Done to the session's connection from outside (the control connection, or its socket):
        # it can go while the session's statement waits, and has nothing to act on once the
        # connection is gone.
        self.outside = outside
        self.drops_socket = drops_socket  # the client drops the socket: nothing answers on it any more
        self.ends = ends  # the error classes the session's statement gets from it

    def __repr__(self) -> str:
        return f"FaultKind({self.name!r})"


ROLLBACK = FaultKind("rollback", "gives up here instead of going on", sql="ROLLBACK;", explored=True)
KILL = FaultKind("kill", "killed from the control connection", outside=True, ends=("connection-lost", "interrupted"))
DISCONNECT = FaultKind(
    "disconnect", "disconnected abruptly, as a crashed process would (no ROLLBACK sent)",
    explored=True, outside=True, drops_socket=True, ends=("connection-lost",),
)
KILL_QUERY = FaultKind("kill-query", "statement killed from the control connection", outside=True, ends=("interrupted",))
RECONNECT = FaultKind("reconnect", "reconnected")
# Not a fault to the session: the step that lets its statement end on its own (a lock wait timeout).
WAIT = FaultKind("wait", "waited for")

# In this order: scenarios' steps are listed and matched in it, explore tries its faults in it.
KINDS = (ROLLBACK, KILL, DISCONNECT, KILL_QUERY, RECONNECT, WAIT)
BY_NAME = {kind.name: kind for kind in KINDS}
STEP_FAULTS = tuple(kind.name for kind in KINDS if kind.written)
EXPLORE_FAULTS = tuple(kind.name for kind in KINDS if kind.explored)
