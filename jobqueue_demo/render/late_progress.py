"""A progress bar that appears only once work has taken a while, and only on a terminal.

Short runs stay silent (a bar flashing for half a second is noise in a transcript); a run
that passes SHOW_AFTER_S shows done/total, the rate and the time left, on stderr.
"""

from __future__ import annotations

import sys
import time

from .color import console

SHOW_AFTER_S = 2.0


def _rate(unit: str):
    """A column of done per second. rich.progress is imported once a bar is shown: 30 ms of
    every explore's start-up otherwise, for a bar most runs never show."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            done, elapsed = task.completed, task.elapsed or 0.0
            rate = done / elapsed if elapsed else 0.0
            return Text(f"{rate:,.0f} {unit}/s")

    return Rate()


class LateProgress:
    """`with LateProgress("schedules", total) as advance: ... advance()`."""

    def __init__(self, unit: str, total: int, quiet: bool = False, stream=None):
        self.unit = unit
        self.total = total
        self.stream = stream or sys.stderr
        self.quiet = quiet or not self.stream.isatty()
        self.bar = None  # a rich Progress, once shown
        self.done = 0
        self.started = 0.0

    def __enter__(self):
        self.started = time.perf_counter()
        return self.advance

    def advance(self, steps: int = 1) -> None:
        self.done += steps
        if self.quiet:
            return
        if self.bar is None:
            if time.perf_counter() - self.started < SHOW_AFTER_S:
                return
            self._start()
        self.bar.update(self.task, completed=self.done)

    def _start(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn(self.unit), BarColumn(), MofNCompleteColumn(), _rate(self.unit), TextColumn("ETA"),
            TimeRemainingColumn(), console=console(self.stream), transient=True,
        )
        self.bar.start()
        # The rate counts from the start of the work, not from when the bar appeared.
        self.task = self.bar.add_task(self.unit, total=self.total, completed=0)
        self.bar.tasks[0].start_time = self.bar.get_time() - (time.perf_counter() - self.started)

    def __exit__(self, *exc_info) -> None:
        if self.bar is not None:
            self.bar.stop()
