"""Fault steps: a session killed, disconnected, interrupted, reconnected, or waited for.

Each acts on a session from outside (the control connection, or the session's socket), and
then settles, because what the fault released lets statements that waited for it answer now.
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..engine.seam import Session
from ..scenario.fault_kinds import BY_NAME, DISCONNECT, KILL, KILL_QUERY, RECONNECT, WAIT, FaultKind
from ..scenario.model import Fault
from . import events as ev

if TYPE_CHECKING:
    from .driver import Driver


def apply(driver: Driver, index: int, step: Fault) -> Iterator[ev.Event]:
    session = driver.conns.sessions[step.session]
    if BY_NAME[step.action].outside and session.closed:
        yield ev.FaultApplied(index, step.action, session.name, driver.now(), "already disconnected")
        return
    yield from INJECTORS[step.action](driver, index, session)


def _reconnect(driver: Driver, index: int, session: Session) -> Iterator[ev.Event]:
    if session.busy:
        yield from driver.stuck(index, f"{session.name} cannot reconnect", [session])
    driver.conns.reconnect(session.name)
    yield ev.FaultApplied(index, RECONNECT.name, session.name, driver.now(), "new connection")


def _kill_query(driver: Driver, index: int, session: Session) -> Iterator[ev.Event]:
    driver.conns.kill_statement(session)
    call = _call(driver, KILL_QUERY)
    yield ev.FaultApplied(index, KILL_QUERY.name, session.name, driver.now(), "statement interrupted", call=call)
    yield from driver.settle()


def _kill(driver: Driver, index: int, session: Session) -> Iterator[ev.Event]:
    began = time.perf_counter()
    driver.conns.kill_connection(session)
    yield from driver.settle()
    yield from _ended(driver, index, session, KILL, began)


def _disconnect(driver: Driver, index: int, session: Session) -> Iterator[ev.Event]:
    began = time.perf_counter()
    waited = session.busy
    session.drop_socket()
    driver.forget_statement(session)
    if waited:
        # InnoDB does not look at the client's socket during a lock wait: the server
        # finds the connection gone only when the wait ends, as with a crashed client.
        driver.conns.orphan(session.thread_id)
        detail = "its statement was waiting: the server ends the session when that wait ends"
        yield ev.FaultApplied(index, DISCONNECT.name, session.name, driver.now(), detail)
        return
    yield from _ended(driver, index, session, DISCONNECT, began)


def _ended(driver: Driver, index: int, session: Session, kind: FaultKind, began: float) -> Iterator[ev.Event]:
    """Wait for the server to end the session the fault ended, and tell how long it took."""
    timeout = driver.options.step_timeout
    gone = driver.conns.wait_gone(session.thread_id, began + timeout)
    took = (time.perf_counter() - began) * 1000.0
    if gone:
        detail = "the server ended the session and rolled back its transaction"
    else:
        detail = f"the server had not noticed after {timeout:g} s"
    yield ev.FaultApplied(index, kind.name, session.name, driver.now(), detail, took if gone else None, _call(driver, kind))
    # The rollback has released the session's locks only now: statements that waited
    # for them answer here, not at some later step.
    yield from driver.settle()


def _call(driver: Driver, kind: FaultKind) -> str:
    """What the server is asked to do the fault with, as the transcript names it; "" for none."""
    return driver.conns.server.dialect.FAULT_CALLS.get(kind.name, "")


def _wait(driver: Driver, index: int, session: Session) -> Iterator[ev.Event]:
    """A `wait` step: let the session's statement end on its own (a lock wait timeout)."""
    deadline = time.perf_counter() + driver.options.step_timeout
    while session.busy:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            yield from driver.stuck(index, f"{session.name} did not finish within the step timeout", [session])
        ready, _, _ = select.select([session], [], [], remaining)
        if ready:
            yield driver.completion(session)
    yield from driver.settle()


# What does each kind a scenario writes (fault_kinds.STEP_FAULTS).
INJECTORS = {
    KILL.name: _kill,
    DISCONNECT.name: _disconnect,
    KILL_QUERY.name: _kill_query,
    RECONNECT.name: _reconnect,
    WAIT.name: _wait,
}
