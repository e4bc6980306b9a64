"""Telling why a schedule cannot go on: the whole waits-for chain, in one sentence per start."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..engine.seam import Session, WaitMonitor
from ..engine.types import QUEUED, ROW_KINDS
from ..scenario.model import Scenario
from . import chain
from . import events as ev


@dataclass(frozen=True)
class Scene:
    """What the diagnosis looks at, when the run is stuck."""

    sessions: Mapping[str, Session]
    waits: Mapping[str, ev.Waiting]  # each waiting session's wait as it was told
    monitor: WaitMonitor
    names: Callable[[], Mapping[int, str]]  # thread id -> how the transcript names it
    name_blockers: bool


def wait_chain(scene: Scene, waiting: list[Session]) -> chain.WaitChain:
    links = {}
    for name, session in scene.sessions.items():
        if session.busy and session.waiting and not session.closed:
            wait = scene.waits.get(name)
            sql = session.pending_sql or ""
            kind, blockers, lock = (wait.kind, wait.blockers, wait.lock) if wait else ("lock", (), "")
            queued = tuple(e.session for e in wait.edges if e.how == QUEUED) if wait else ()
            asked = wait.requested if wait else ""
            links[name] = chain.Link(name, blockers, kind, _fuller_lock(scene, session, wait) or lock, sql, queued, asked)
    active = {tid for tid, trx in scene.monitor.transactions().items() if trx.active}
    threads = {s.name: s.thread_id for s in scene.sessions.values()}

    def state_of(name: str) -> str:
        if name not in scene.sessions:
            return chain.OUTSIDE
        if scene.sessions[name].busy:
            return chain.RUNNING
        return chain.IDLE_IN_TRANSACTION if threads[name] in active else chain.IDLE

    return chain.follow([s.name for s in waiting], links, state_of)


# Reads of InnoDB's lock tables for the waited-for record, at most: each waits out their
# cache's refresh (about 0.1 s), which costs nothing once the run is stuck.
FULLER_LOCK_READS = 3


def _fuller_lock(scene: Scene, session: Session, wait: ev.Waiting | None) -> str:
    """The waited-for record, when the wait was told without it: with one other active
    transaction the holder is deduced without InnoDB's lock tables, which name the record.
    Read once the run is stuck; again while they lack it: their cache refreshes only after
    0.1 s with no reader at all, and other clients reading them keep it stale (the wait
    missing, so the record with it, in 1 stuck run in 4 while two other runs used the server)."""
    if wait is None or wait.kind not in ROW_KINDS or wait.requested or wait.lock.endswith(")") or not scene.name_blockers:
        return ""
    names = scene.names()
    found = ""
    for _ in range(FULLER_LOCK_READS):
        info = scene.monitor.describe_from_lock_tables(session.thread_id)
        if tuple(names.get(t, f"connection {t}") for t in info.blockers) != wait.blockers:
            continue
        found = info.lock
        if found.endswith(")"):
            break
    return found


def message(scenario: Scenario, index: int, what: str, waiting: list[Session], found: chain.WaitChain) -> str:
    """The chain in sentences, each session named as the transcript names it (`B@2` on a cluster)."""
    prompts = scenario.prompts
    named = found.renamed(prompts)
    starts = chain.starts(named, [prompts.get(s.name, s.name) for s in waiting])
    return f"stuck at {_where(scenario, index)}: {what}: " + "; ".join(named.sentence(name) for name in starts)


def _where(scenario: Scenario, index: int) -> str:
    if index < len(scenario.steps):
        return f"{scenario.path}:{scenario.steps[index].line} (step {index + 1})"
    return f"{scenario.path} (end)"
