"""The teacher's controls: a step asked for from the page, the terminal or a timer.

Called with every event before the pages see it, on the run's thread, like `run --step`'s
StepGate: a StepStarting is held until the teacher asks for that step. The page's request
comes from the web server's thread through a pipe, so one select() waits for the page and the
terminal alike and a press is seen at once. With --predict, the first press on a statement
reveals the class's tally and the second runs it.
"""

from __future__ import annotations

import os
import select
import threading
import time

from ..errors import stop_of
from ..render.stepper import ADVANCE, QUIT, Interrupted, Quit
from ..run import events as ev
from ..scenario.model import is_wait
from .state import READY, RUNNING, LessonState, lesson_length

STEP = b"s"


class Teacher:
    """What holds each step of a served lesson; `keys` (render/stepper.Keys) or None."""

    def __init__(self, state: LessonState, publish, keys=None, pace: float | None = None):
        self.state = state
        self.publish = publish  # tells every page the state changed; never blocks
        self.keys = keys
        self.pace = pace
        self._wake_r, self._wake_w = os.pipe()
        self._ready = threading.Lock()
        self._pressed = False  # a press written and not yet taken: a second one is refused
        self.waiting: dict[str, None] = {}
        self.total = lesson_length(state.scenario)
        self.count = 0  # steps started: a spec's permutations run the scenario's steps again

    def close(self) -> None:
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- the web server's thread ---------------------------------------------------------------

    def press(self) -> bool:
        """The teacher's page asked for the next step; False when the run is not waiting for one."""
        with self._ready:
            if self.state.phase != READY or self._pressed:
                return False
            self._pressed = True
            os.write(self._wake_w, STEP)
            return True

    # -- the run's thread -------------------------------------------------------------------

    def __call__(self, event) -> None:
        if isinstance(event, ev.Waiting):
            self.waiting[event.session] = None
        if isinstance(event, (ev.Completed, ev.FaultApplied)):
            self.waiting.pop(event.session, None)
        if isinstance(event, ev.StepStarting):
            self.count += 1
            if not (is_wait(event.step) and event.step.session not in self.waiting):
                try:
                    self._hold(event.index)
                except KeyboardInterrupt as exc:
                    raise Interrupted(self.count, self.total, stop_of(exc)) from None
        self.state.add(event)
        self.publish()

    def _hold(self, index: int) -> None:
        self.state.hold(index)
        self.publish()
        while True:
            self._wait_for_press()
            with self._ready:
                self._pressed = False
                if not self.state.reveal():
                    self.state.set_phase(RUNNING)
                    return
            self.publish()

    def _wait_for_press(self) -> None:
        """Until a press: the page's, a key, or the pace's timer; Quit on q or end of input."""
        deadline = None if self.pace is None else time.monotonic() + self.pace
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            watched = [self._wake_r] + ([self.keys.fd] if self.keys is not None else [])
            ready, _, _ = select.select(watched, [], [], left)
            if not ready:
                return  # the pace ran out
            if self._wake_r in ready:
                os.read(self._wake_r, 1)
                return
            key = self.keys.read(0)
            if key == "" and self.pace is not None:
                self.keys = None  # paced: the lesson goes on without a terminal
            elif key in QUIT:
                raise Quit(self.count, self.total)
            elif key in ADVANCE:
                return

    def linger(self) -> None:
        """After the end: the pages stay until Enter, q or end of input on the terminal (or a stop signal)."""
        while self.keys is not None:
            key = self.keys.read(None)
            if key in ADVANCE or key in QUIT:
                return
