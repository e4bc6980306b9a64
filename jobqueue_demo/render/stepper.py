"""Step-through and pacing for `run`: each step is held until a key is pressed or a timer ends.

A run (run/driver.py) yields StepStarting before a step and does nothing until asked for the
next event, so holding here holds the run. Quit unwinds out of the run; closing the run's
event generator on the way rolls every session back and drops the scratch database.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass

from ..errors import Stopped, stop_of
from ..run import events as ev
from ..scenario.model import Fault, Locks, Narration, Statement, is_wait

ADVANCE = ("\n", "\r", " ")
# "" is end of input: with nobody left to press Enter, stopping is the only clean choice.
QUIT = ("q", "Q", "\x04", "")
# Long statements are cut: the prompt is a reminder, the transcript shows them whole.
PROMPT_MAX_LINES = 6


class Quit(Exception):
    """The viewer asked to stop before step `step` (1-based) of `total`."""

    def __init__(self, step: int, total: int):
        super().__init__(f"quit before step {step} of {total}")
        self.step = step
        self.total = total


class Interrupted(Quit):
    """A stop signal at a step's prompt (Ctrl-C, SIGTERM, SIGHUP): the same clean stop as `q`,
    reported as that signal."""

    def __init__(self, step: int, total: int, stop: Stopped):
        super().__init__(step, total)
        self.stop = stop
        self.args = (f"{stop} before step {step} of {total}",)


@dataclass(eq=False)
class Pacing:
    """--step and --pace: what holds each step back."""

    step: bool  # hold each step until Enter (or q)
    pace: float | None  # seconds between steps; with `step`, a key press cuts it short


class Keys:
    """Single key presses from a file descriptor; a terminal is in cbreak mode meanwhile, so
    keys are neither echoed into the transcript nor held back until Enter."""

    def __init__(self, fd: int):
        self.fd = fd
        self._saved = None

    def __enter__(self) -> Keys:
        if os.isatty(self.fd):
            import termios
            import tty

            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def read(self, timeout: float | None) -> str | None:
        """One key, "" at end of input, None when `timeout` seconds pass first."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        return os.read(self.fd, 1).decode("utf-8", "replace")


def step_text(step) -> str:
    """What a step will do, on one line: the session and its statement, or the action."""
    if isinstance(step, Statement):
        return f"{step.session}> {' '.join(step.sql.split())}"
    if isinstance(step, Narration):
        return f"(narration) {' '.join(step.text.split())}"
    if is_wait(step):
        return f"wait until {step.session}'s statement ends"
    if isinstance(step, Fault):
        return f"{step.action} {step.session}"
    if isinstance(step, Locks):
        return "show the locks"
    return type(step).__name__


def prompt_lines(index: int, total: int, step, width: int, waiting: tuple[str, ...] = ()) -> list[str]:
    """`-- step 4/13, next: B> SELECT ...` wrapped to the terminal, then the keys to press.

    Sessions held on a lock are named: a pause longer than the server's lock wait timeout
    would end their statement with an error the lesson does not show.
    """
    held = f" ({', '.join(waiting)} waiting on a lock)" if waiting else ""
    from .wrap import wrap

    lines = wrap(f"-- step {index + 1}/{total}{held}, next: {step_text(step)}", width - 1, "   ")
    if len(lines) > PROMPT_MAX_LINES:
        last = lines[PROMPT_MAX_LINES - 1]
        cut = last[: width - 3]
        # At a space, so no word is cut; a line that is one word is cut where it must be.
        cut = cut[: cut.rstrip().rfind(" ")] if cut.strip().count(" ") else cut
        lines = lines[: PROMPT_MAX_LINES - 1] + [cut.rstrip() + " …"]
    return lines + ["   [Enter] run it   [q] quit"]


def erase(count: int) -> str:
    """Terminal codes that take back the last `count` lines, the cursor being on the last."""
    up = f"\x1b[{count - 1}A" if count > 1 else ""
    return f"\r{up}\x1b[J"


class StepGate:
    """Called with every event before it is shown; holds each StepStarting per the pacing."""

    def __init__(self, pacing: Pacing, total: int, keys: Keys | None, prompt, width: int):
        self.pacing = pacing
        self.total = total
        self.keys = keys
        self.prompt = prompt
        self.width = width
        self.waiting: dict[str, None] = {}  # insertion-ordered set
        self.at = 0  # the step shown last, 1-based

    def __call__(self, event) -> None:
        if isinstance(event, ev.RunStarted) and self.pacing.step:
            text = (f"-- step-through on scratch database {event.database}: "
                    "Enter runs the next step, q quits (everything is rolled back)")
            from .wrap import wrap

            self._say("\n".join(wrap(text, self.width - 1, "   ")) + "\n")
        if isinstance(event, ev.Waiting):
            self.waiting[event.session] = None
        if isinstance(event, (ev.Completed, ev.FaultApplied)):
            self.waiting.pop(event.session, None)
        if isinstance(event, ev.StepStarting):
            self.at = event.index + 1
            try:
                self._hold(event)
            except KeyboardInterrupt as exc:
                raise Interrupted(self.at, self.total, stop_of(exc)) from None

    def _hold(self, event: ev.StepStarting) -> None:
        if is_wait(event.step) and event.step.session not in self.waiting:
            return  # its statement has ended already: the step does nothing, and shows nothing
        if not self.pacing.step:
            if self.pacing.pace and event.index > 0:
                time.sleep(self.pacing.pace)
            return
        lines = prompt_lines(event.index, self.total, event.step, self.width, tuple(self.waiting))
        self._say("\n".join(lines))
        try:
            key = self._key()
        finally:
            self._say(erase(len(lines)) if self.prompt.isatty() else "\n")
        if key in QUIT:
            raise Quit(event.index + 1, self.total)

    def _key(self) -> str | None:
        """The first key that means something, or None when the pace runs out first."""
        deadline = None if self.pacing.pace is None else time.monotonic() + self.pacing.pace
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            key = self.keys.read(left)
            if key is None or key in ADVANCE or key in QUIT:
                return key
            if deadline is not None and left == 0.0:
                return None

    def _say(self, text: str) -> None:
        self.prompt.write(text)
        self.prompt.flush()
