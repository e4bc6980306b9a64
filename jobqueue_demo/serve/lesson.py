"""One served lesson: its state, the teacher's controls and the web server, started together
and stopped together, every page told why."""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass

from ..errors import UsageError
from ..render.stepper import Quit
from .state import OVER, STOPPED, LessonState
from .teacher import Teacher
from .web import Hub, LessonApp, WebServer, allowed_hosts, listen


@dataclass(eq=False)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int | None = None  # None: the first free of DEFAULT_PORTS
    predict: bool = False
    pace: float | None = None


# Where a lesson listens unless told: a teacher's second lesson, or another program on 8000, takes the next.
DEFAULT_PORTS = range(8000, 8020)


@dataclass(frozen=True)
class Addresses:
    students: str
    teacher: str


def shown_host(host: str) -> str:
    """The address a student types: on every interface, this machine's address on its network."""
    if host not in ("0.0.0.0", "::", ""):
        return f"[{host}]" if ":" in host else host
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # a UDP connect sends nothing: it only picks the interface
        return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()
    finally:
        probe.close()


class Lesson:
    """A context: the web server runs inside it; on the way out every page is told the lesson
    ended (and why) before the server stops."""

    def __init__(self, scenario, server_label: str, options: ServeOptions, keys=None):
        self.state = LessonState(scenario, server_label, options.predict)
        self.hub = Hub(self.state)
        self.teacher = Teacher(self.state, self.hub.publish, keys, options.pace)
        self.token = secrets.token_urlsafe(18)
        try:
            sock = _listening(options.host, options.port)
        except BaseException:
            self.teacher.close()
            raise
        port = sock.getsockname()[1]
        base = f"http://{shown_host(options.host)}:{port}/"
        self.addresses = Addresses(base, f"{base}?teacher={self.token}")
        app = LessonApp(self.state, self.teacher, self.hub, self.token).starlette(allowed_hosts(options.host))
        self.web = WebServer(app, sock)

    def __enter__(self) -> Lesson:
        try:
            self.web.start()
        except BaseException:
            self.web.sock.close()
            self.teacher.close()
            raise
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if exc is not None and self.state.phase != OVER:
            self.state.set_phase(STOPPED, _why_stopped(exc))
        self.hub.close()
        self.web.stop()
        self.teacher.close()

    def on_event(self, event) -> None:
        self.teacher(event)

    def finish(self, report, page_html: str | None) -> None:
        self.state.finish(report.mismatches, report.checked, page_html)
        self.hub.publish()

    def linger(self) -> None:
        self.teacher.linger()


def _listening(host: str, port: int | None):
    ports = DEFAULT_PORTS if port is None else (port,)
    for each in ports:
        try:
            return listen(host, each)
        except OSError as e:
            failure = e
    where = f"{host}:{ports[0]}" + (f"-{ports[-1]}" if len(ports) > 1 else "")
    raise UsageError(f"cannot listen on {where}: {failure.strerror}; --port 0 takes any free port")


def _why_stopped(exc: BaseException) -> str:
    if isinstance(exc, Quit):
        return f"the lesson was ended ({exc}): sessions rolled back, scratch database dropped"
    if isinstance(exc, KeyboardInterrupt):
        return "the lesson was stopped from the terminal: sessions rolled back, scratch database dropped"
    return f"the lesson stopped: {exc}"
