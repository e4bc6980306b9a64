"""When a step is over: every statement in flight has answered or is seen waiting on a lock.

After each step the driver settles, so the transcript is in the order things happened and a
wait never hangs the run. This module is the policy alone (how often to look, when a wait is
believed, which answer is told first); the driver turns its verdicts into events.
"""

from __future__ import annotations

import re
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.seam import Session, WaitMonitor
from ..engine.types import ROW
from ..errors import StuckError

if TYPE_CHECKING:
    from .driver import RunOptions

# A lock wait is normally visible 2-5 ms after sending; polling this often keeps the
# detection latency near the server's own, without a fixed sleep.
POLL_FIRST_S = 0.0005
POLL_MAX_S = 0.002
# How long a freed waiter's answer may be held back for the statement that freed it.
LEAD_FIRST_S = 0.05
SKIPS_ROW_LOCKS = re.compile(r"\b(SKIP\s+LOCKED|NOWAIT)\b", re.IGNORECASE)
SKIP_LOCKED_CONFIRM_S = 0.005


# Plain, not frozen, and compared by identity, as run/events.py: short-lived values nothing
# hashes or compares.
@dataclass(eq=False)
class Answered:
    """The session's statement has its answer ready to read."""

    session: Session


@dataclass(eq=False)
class Blocked:
    """The session's statement is confirmed waiting on a lock of this kind."""

    session: Session
    kind: str


def settle(
    sessions: dict[str, Session], monitor: WaitMonitor, options: RunOptions, lead: Session | None = None
) -> Iterator[Answered | Blocked]:
    """Until every in-flight statement has answered or is confirmed waiting on a lock: for at
    most `options.step_timeout`, and a wait is believed once seen for `options.confirm_s`.

    An `Answered` session must be read before the next verdict is asked for. "Waiting" must
    be seen on two polls in a row where the monitor's view can lag (`monitor.exact` false:
    just after InnoDB releases a lock the waiter may still show its old state for a moment
    before it wakes); PostgreSQL's lock table is changed by the releaser itself, so one
    sighting there is the truth. The statement just sent (`lead`) is reported
    before the ones it set free: InnoDB releases locks before a COMMIT's reply is sent, so a
    freed waiter often answers first, but the lesson reads in cause-then-effect order.
    """
    deadline = time.perf_counter() + options.step_timeout
    interval = POLL_FIRST_S
    confirmed: dict[str, str] = {}
    since: dict[str, float] = {}  # when each wait in `confirmed` was first seen
    while True:
        busy = [s for s in sessions.values() if s.busy and not s.closed]
        if not busy:
            return
        ready, _, _ = select.select(busy, [], [], interval)
        lead_pending = lead is not None and lead.busy and lead not in ready and lead.name not in confirmed
        hold_back = lead_pending and time.perf_counter() - lead.sent_at < LEAD_FIRST_S
        # A lead that was itself waiting was freed like the others: then the longest wait is
        # told first (a PostgreSQL deadlock victim is the session that waited longest).
        for session in sorted(ready, key=lambda s: (s is not lead or s.waiting, s.sent_at if s.waiting else 0.0)):
            if session is lead or not hold_back:
                yield Answered(session)
        busy = [s for s in busy if s.busy]
        if not busy:
            return
        kinds = monitor.blocked([s.thread_id for s in busy])
        waiting_now = {s.name: kinds[s.thread_id] for s in busy if s.thread_id in kinds}
        now = time.perf_counter()
        since = {n: since.get(n, now) if confirmed.get(n) == k else now for n, k in waiting_now.items()}
        known = {s.name for s in busy if s.waiting}  # confirmed by an earlier step already
        held = all(
            (monitor.exact or confirmed.get(n) == k) and (n in known or now - since[n] >= _confirm_s(sessions[n], k, options))
            for n, k in waiting_now.items()
        )
        if len(waiting_now) == len(busy) and held:
            for session in busy:
                if not session.waiting:
                    yield Blocked(session, waiting_now[session.name])
            # A cycle of waits is not settled: the server breaks it (InnoDB at once, PostgreSQL
            # after deadlock_timeout), and its victim's error belongs to this step.
            if not monitor.in_cycle([s.thread_id for s in busy]):
                return
        # A new sighting is re-checked at once: a deadlock victim or a freed waiter shows
        # its wait only for a moment.
        interval = 0.0 if waiting_now and waiting_now != confirmed else min(max(interval, POLL_FIRST_S) * 2, POLL_MAX_S)
        confirmed = waiting_now
        if time.perf_counter() > deadline:
            # The statement is named: a transcript prints one when it answers or is seen
            # waiting, and this one did neither.
            running = [f"{s.name} ({_gist(s.pending_sql)})" for s in busy if s.name not in waiting_now]
            raise StuckError(
                f"step timeout: {', '.join(running)} still running after {options.step_timeout:g} s "
                "(raise --step-timeout for slow statements)"
            )


GIST_CHARS = 60


def _gist(sql: str | None) -> str:
    """A statement on one short line."""
    text = " ".join((sql or "").split())
    return text if len(text) <= GIST_CHARS else text[: GIST_CHARS - 1] + "…"


def _confirm_s(session: Session, kind: str, options: RunOptions) -> float:
    """SKIP LOCKED and NOWAIT never wait for a row lock, but MariaDB shows the momentary
    waiting lock SKIP LOCKED enqueues before it skips; only a lasting one is believed."""
    if kind == ROW and SKIPS_ROW_LOCKS.search(session.pending_sql or ""):
        return max(options.confirm_s, SKIP_LOCKED_CONFIRM_S)
    return options.confirm_s

