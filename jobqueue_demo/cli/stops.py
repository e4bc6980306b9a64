"""Which signals stop a run, and how their handlers are put in place: loaded first of the CLI
(before typer and the commands, some 50 ms of imports), so a stop in that time is told as one
line with its exit code too, not as a traceback or a silent death."""

from __future__ import annotations

import contextlib
import os
import signal

from ..errors import STOP_SIGNALS, Stopped, stop_of


def catch_stops(handler) -> None:
    """`handler` for every stop signal, but one this process was started ignoring: a run under
    `nohup` keeps ignoring SIGHUP, and one started in the background by a script keeps ignoring
    Ctrl-C, as Python itself leaves SIGINT then."""
    for stop in STOP_SIGNALS:
        if signal.getsignal(stop) is not signal.SIG_IGN:
            signal.signal(stop, handler)


def stop_loading(signum, frame) -> None:
    """Until main() puts its own handler in place nothing has been started that needs a
    clean-up: the stop ends the process where it is."""
    raise Stopped(signum)


def told(exc: KeyboardInterrupt) -> int:
    """The stop's line on standard error, and its exit code."""
    stop = stop_of(exc)
    with contextlib.suppress(OSError):  # a closed standard error: the exit code still tells
        os.write(2, f"jobqueue-demo: {stop}\n".encode())
    return stop.exit_code
