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
from ..scenario.model import Fault
from . import events as ev

if TYPE_CHECKING:
    from .driver import Driver


def apply(driver: Driver, index: int, step: Fault) -> Iterator[ev.Event]:
    conns = driver.conns
    session = conns.sessions[step.session]
    action = step.action
    if action == "wait":
        yield from _wait_for(driver, index, session)
        return
    if action == "reconnect":
        if session.busy:
            yield from driver.stuck(index, f"{session.name} cannot reconnect", [session])
        conns.reconnect(session.name)
        yield ev.FaultApplied(index, action, session.name, driver.now(), "new connection")
        return
    if session.closed:
        yield ev.FaultApplied(index, action, session.name, driver.now(), "already disconnected")
        return
    call = conns.server.dialect.FAULT_CALLS.get(action, "")
    if action == "kill-query":
        conns.kill_statement(session)
        yield ev.FaultApplied(index, action, session.name, driver.now(), "statement interrupted", call=call)
        yield from driver.settle()
        return
    began = time.perf_counter()
    if action == "kill":
        conns.kill_connection(session)
        yield from driver.settle()
    else:
        waited = session.busy
        session.drop_socket()
        driver.forget_statement(session)
        if waited:
            # InnoDB does not look at the client's socket during a lock wait: the server
            # finds the connection gone only when the wait ends, as with a crashed client.
            conns.orphan(session.thread_id)
            detail = "its statement was waiting: the server ends the session when that wait ends"
            yield ev.FaultApplied(index, action, session.name, driver.now(), detail)
            return
    timeout = driver.options.step_timeout
    gone = conns.wait_gone(session.thread_id, began + timeout)
    took = (time.perf_counter() - began) * 1000.0
    if gone:
        detail = "the server ended the session and rolled back its transaction"
    else:
        detail = f"the server had not noticed after {timeout:g} s"
    yield ev.FaultApplied(index, action, session.name, driver.now(), detail, took if gone else None, call)
    # The rollback has released the session's locks only now: statements that waited
    # for them answer here, not at some later step.
    yield from driver.settle()


def _wait_for(driver: Driver, index: int, session: Session) -> Iterator[ev.Event]:
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
