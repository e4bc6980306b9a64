"""Why a workers run stopped completing jobs: the waits-for picture, read from the server.

When no job completes for the stall window the run ends with exit 1, and this says who waits
for whom, in which lock mode, on which index record, and how many rows each waiter has
locked. The server's lock tables are read by the engine (engine/queue_sql.py's `lock_waits`).

On a Galera cluster every node's lock tables are read (engine/galera/queue.py), each thread
is named with its node ("worker 3@2", "the applier of node 2"), and a line gives the nodes'
flow control when a node holds write sets it has not applied: one node's stuck applier stops
every node's commits, with no lock wait anywhere else to show for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ..engine.types import as_text, split
from ..errors import ServerError

if TYPE_CHECKING:
    from ..engine.seam import FlowControl

FLOW_CONTROL_NOTE = (
    "Flow control pauses every node's commits until the node that requested it has applied its receive queue: "
    "see 'A hang a single applier can cause' in docs/workers.md"
)


@dataclass(frozen=True)
class LockWait:
    waiter: str  # "worker 3" ("worker 3@2" on a cluster), or "thread 812 (not a worker of this run)"
    blocker: str
    mode: str  # the waiting lock's mode, as complete as the server tells it
    blocking_mode: str
    table: str
    index: str
    record: str  # the index record, e.g. "supremum pseudo-record" or "'queued', 779"
    waiter_rows_locked: int | None  # None where the server keeps no count (PostgreSQL)
    waiter_lock_structs: int | None
    waiter_active_s: int
    statement: str

    def line(self) -> str:
        counts = "".join(
            f", {n:,} {what}" for n, what in ((self.waiter_rows_locked, "rows locked"), (self.waiter_lock_structs, "lock structs"))
            if n is not None
        )
        where = f"{self.table}.{self.index}" if self.index else self.table
        return (
            f"{self.waiter} (trx active {self.waiter_active_s} s{counts}) in {self.statement} waits for {self.mode} "
            f"on {where} record {self.record}"
        )


@dataclass
class Diagnosis:
    waits: list[LockWait] = field(default_factory=list)
    note: str = ""
    flow: list[FlowControl] = field(default_factory=list)  # every node's, on a cluster

    def lines(self) -> list[str]:
        """One line per waiting lock, its blockers named together; on a cluster, the nodes'
        flow control when a node has write sets it has not applied."""
        return self._lock_lines() + _flow_lines(self.flow)

    def _lock_lines(self) -> list[str]:
        if not self.waits:
            return [self.note or "no worker waits for a lock: the server, not a lock, is what stalls"]
        grouped: dict[tuple, list[str]] = {}
        for w in self.waits:
            grouped.setdefault((w.line(), w.blocking_mode), []).append(w.blocker)
        lines = [f"{line}, held ({mode}) by {', '.join(blockers)}" for (line, mode), blockers in grouped.items()]
        return lines + ([self.note] if self.note else [])

    def as_dict(self) -> dict:
        found = {"waits": [asdict(w) for w in self.waits], "note": self.note}
        return found | ({"flow": [asdict(f) for f in self.flow]} if self.flow else {})


@dataclass(frozen=True)
class _Names:
    """What the picture calls a thread: the run's ids carry their node on a cluster."""

    workers: dict[int, int]  # the run's thread id -> worker index
    appliers: frozenset[int] = frozenset()
    cluster: bool = False

    def __call__(self, thread) -> str:
        if thread is None:
            return "a transaction with no client thread"
        thread = int(thread)
        node, own = split(thread)
        at = f"@{node}" if self.cluster else ""
        if thread in self.appliers:
            return f"the applier of node {node}"
        return f"worker {self.workers[thread]}{at}" if thread in self.workers else f"thread {own}{at} (not a worker of this run)"


def diagnose(scratch, threads: dict[int, int]) -> Diagnosis:
    """The lock waits of the run's workers (`scratch`: crew.Scratch; `threads`: the run's thread
    id, crew.Crew.thread_id, -> worker index); on a cluster, every node's, appliers included."""
    if not threads:
        return Diagnosis(note="no worker is running")
    try:
        if scratch.nodes is not None:
            return _on_cluster(scratch.nodes, threads)
        found = scratch.queue.lock_waits(scratch.database, list(threads))
        return _diagnosis([_wait(row, _Names(threads), full_mode) for row, full_mode in found])
    except ServerError as exc:
        if getattr(scratch.database.conn, "dropped", None):
            raise  # the server fell silent: that, not the stall, is what ends the run (exit 3)
        # e.g. a DSN user without PROCESS: the stall is still reported, with what is missing.
        return Diagnosis(note=f"the server did not show its locks ({exc})")


def _on_cluster(nodes, threads: dict[int, int]) -> Diagnosis:
    found = nodes.lock_waits(list(threads))
    names = _Names(threads, found.appliers, cluster=True)
    return _diagnosis([_wait(row, names, full_mode) for row, full_mode in found.rows], nodes.flow_control())


def _diagnosis(waits: list[LockWait], flow: list[FlowControl] | None = None) -> Diagnosis:
    return Diagnosis(waits=sorted(waits, key=lambda w: (-w.waiter_active_s, w.waiter)), note=_note(waits), flow=flow or [])


def _wait(row: tuple, names: _Names, full_mode: str | None) -> LockWait:
    waiter, blocker, mode, blocking_mode, table, index, record, rows_locked, structs, active, query = row
    return LockWait(
        waiter=names(waiter),
        blocker=names(blocker),
        mode=full_mode or as_text(mode),
        blocking_mode=as_text(blocking_mode),
        table=as_text(table).replace("`", "").rpartition(".")[2],
        index=as_text(index),
        record=as_text(record) or "(not shown by the server)",
        waiter_rows_locked=_count(rows_locked),
        waiter_lock_structs=_count(structs),
        waiter_active_s=int(active or 0),
        statement=" ".join(as_text(query).split()) or "(between statements)",
    )


def _count(value) -> int | None:
    return None if value is None else int(value)


def _note(waits: list[LockWait]) -> str:
    """Name the shape docs/workers.md explains when the picture shows it."""
    if any("insert intention" in w.mode.lower().replace("_", " ") and "supremum" in w.record for w in waits):
        return (
            "completions wait with an insert-intention lock on the supremum of an index page that "
            "claims gap-locked under REPEATABLE READ: see 'The livelock' in docs/workers.md"
        )
    return ""


def _flow_lines(flow: list[FlowControl]) -> list[str]:
    """One line for the nodes with write sets queued or flow control on, none when no node has."""
    queued = [f for f in flow if f.queued]
    if not queued:
        return []
    figures = "; ".join(_figures(f) for f in queued) + "; paused is the share of the time since FLUSH STATUS"
    if any(f.active or f.requested for f in queued):
        return [f"flow control: {figures}. {FLOW_CONTROL_NOTE}"]
    return [f"write sets not yet applied: {figures}. No node requested flow control, so none is paused for them"]


def _figures(flow: FlowControl) -> str:
    said = [word for word, on in (("requested", flow.requested), ("active", flow.active)) if on]
    state = "" if flow.state in ("", "Synced") else f" ({flow.state})"
    figures = [f"receive queue {flow.recv_queue:,}", f"send queue {flow.send_queue:,}", f"paused {flow.paused:.0%}"]
    return f"node {flow.node}{state}: {', '.join(said + figures)}"
