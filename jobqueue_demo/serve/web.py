"""The lesson's web server: a Starlette app on uvicorn, in a thread of its own.

Routes are fixed: the page, its two assets (read from the package, never a file named by a
request), the state, its stream of changes (server-sent events), the teacher's step, the
class's votes, a deadlock's picture by number and, once the lesson is over, the page of the
whole run as `export` writes it. Every response says what the browser may load: this
server's script and style only, nothing inline.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
from contextlib import asynccontextmanager
from importlib.resources import files

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .state import BEFORE, RUNNING, LessonState
from .teacher import Teacher

PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
# The exported page carries its CSS inline and no script at all (render/export.py).
EXPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
IMAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'"
ASSETS = {"/static/lesson.js": ("lesson.js", "text/javascript"), "/static/lesson.css": ("lesson.css", "text/css")}
# A page hears from the server at least this often, so a vanished one is noticed and dropped.
KEEPALIVE_S = 15.0
# How long a step request waits for its step to be run before answering anyway.
STEP_ANSWER_S = 60.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _headers(csp: str) -> dict[str, str]:
    return {"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store", "X-Frame-Options": "DENY"}


class Hub:
    """Wakes every page's stream when the state changes; called from the run's thread.

    Each stream holds one flag, not a queue: a slow page is sent the latest state when it is
    ready for more, and the run never waits for a page."""

    def __init__(self, state: LessonState):
        self.state = state
        self.loop: asyncio.AbstractEventLoop | None = None
        self._flags: set[asyncio.Event] = set()
        self.closed = False

    def publish(self) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop closed between the check and the call
                pass

    def close(self) -> None:
        self.closed = True
        self.publish()

    def _wake(self) -> None:
        for flag in self._flags:
            flag.set()

    async def changes(self):
        """The state as server-sent events: now, then after each change, the latest only."""
        flag = asyncio.Event()
        self._flags.add(flag)
        sent = -1
        try:
            while True:
                version, text = self.state.json()
                if version != sent:
                    sent = version
                    yield f"event: state\ndata: {_with_clock(self.state, text)}\n\n"
                if self.closed:
                    yield "event: end\ndata: {}\n\n"
                    return
                try:
                    await asyncio.wait_for(flag.wait(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield ": still here\n\n"
                flag.clear()
        finally:
            self._flags.discard(flag)

    async def until(self, done) -> None:
        """Until `done()` holds, looked at after each change of the state (or the end)."""
        flag = asyncio.Event()
        self._flags.add(flag)
        try:
            while not self.closed and not done():
                await flag.wait()
                flag.clear()
        finally:
            self._flags.discard(flag)


def _with_clock(state: LessonState, text: str) -> str:
    """The state with the lesson's clock now: a page that joins long after the last change
    still counts a wait's time from the right moment."""
    return '{"now_ms": %.1f, "state": %s}' % (state.now_ms(), text)


def _asset(name: str) -> bytes:
    return files(__package__).joinpath("static", name).read_bytes()


def _json(body: dict, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status, headers=_headers(PAGE_CSP))


class LessonApp:
    """The routes, one method each, over the lesson's state, the teacher's controls and the hub."""

    def __init__(self, state: LessonState, teacher: Teacher, hub: Hub, token: str):
        self.state = state
        self.teacher = teacher
        self.hub = hub
        self.token = token.encode()
        self.page = _asset("index.html")
        self.assets = {path: (_asset(name), kind) for path, (name, kind) in ASSETS.items()}

    def starlette(self, hosts: list[str]) -> Starlette:
        routes = [
            Route("/", self.index),
            *(Route(path, self.asset) for path in ASSETS),
            Route("/api/state", self.current),
            Route("/api/events", self.events),
            Route("/api/step", self.step, methods=["POST"]),
            Route("/api/vote", self.vote, methods=["POST"]),
            Route("/api/cycle/{number:int}.svg", self.cycle),
            Route("/lesson.html", self.whole_run),
        ]
        middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)]
        return Starlette(routes=routes, middleware=middleware, lifespan=asynccontextmanager(self.started))

    async def started(self, app):
        self.hub.loop = asyncio.get_running_loop()  # the loop the run's thread wakes every stream on
        yield

    def is_teacher(self, request: Request) -> bool:
        return secrets.compare_digest(request.query_params.get("teacher", "").encode("utf-8", "replace"), self.token)

    async def index(self, request: Request) -> Response:
        return Response(self.page, media_type="text/html; charset=utf-8", headers=_headers(PAGE_CSP))

    async def asset(self, request: Request) -> Response:
        body, kind = self.assets[request.url.path]
        return Response(body, media_type=kind, headers=_headers(PAGE_CSP))

    async def current(self, request: Request) -> Response:
        _, text = self.state.json()
        body = '{"teacher": %s, %s' % ("true" if self.is_teacher(request) else "false", _with_clock(self.state, text)[1:])
        return Response(body, media_type="application/json", headers=_headers(PAGE_CSP))

    async def events(self, request: Request) -> Response:
        headers = _headers(PAGE_CSP) | {"X-Accel-Buffering": "no"}
        return StreamingResponse(self.hub.changes(), media_type="text/event-stream", headers=headers)

    async def step(self, request: Request) -> Response:
        """The teacher's press: answered once the step has run (or revealed the class's tally)."""
        if not self.is_teacher(request):
            return _json({"error": "only the teacher's page steps the lesson"}, 403)
        state = self.state
        try:
            # A script may ask before the run is ready (its sessions connecting) or while a step runs.
            await asyncio.wait_for(self.hub.until(lambda: state.phase not in (BEFORE, RUNNING)), STEP_ANSWER_S)
            before, _ = state.json()
            if not self.teacher.press():
                return _json({"error": f"no step is waiting ({state.phase})", "phase": state.phase}, 409)
            await asyncio.wait_for(self.hub.until(lambda: state.json()[0] > before and state.phase != RUNNING), STEP_ANSWER_S)
        except asyncio.TimeoutError:
            pass
        return _json({"at": state.at, "phase": state.phase, "version": state.json()[0], "message": state.message})

    async def vote(self, request: Request) -> Response:
        # JSON only: a form posted from another site cannot send it without the browser asking first.
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _json({"error": "a vote is JSON"}, 415)
        try:
            body = json.loads((await request.body())[:1000])
            voter, choice = str(body["voter"])[:64], str(body["choice"])
        except (ValueError, KeyError, TypeError):
            return _json({"error": 'a vote is {"voter": ..., "choice": ...}'}, 400)
        if not self.state.vote(voter, choice):
            return _json({"error": "no step is asking for a prediction"}, 409)
        self.hub.publish()
        return _json({"ok": True})

    async def cycle(self, request: Request) -> Response:
        svg = self.state.cycle_svg(request.path_params["number"])
        if svg is None:
            return Response("no such picture", 404, headers=_headers(IMAGE_CSP))
        return Response(svg, media_type="image/svg+xml", headers=_headers(IMAGE_CSP))

    async def whole_run(self, request: Request) -> Response:
        if self.state.page_html is None:
            return Response("the lesson is not over yet", 404, headers=_headers(EXPORT_CSP))
        return Response(self.state.page_html, media_type="text/html; charset=utf-8", headers=_headers(EXPORT_CSP))


def allowed_hosts(host: str) -> list[str]:
    """On the loopback only the loopback's names, so a web site a browser visits cannot reach
    the lesson by pointing its own name at 127.0.0.1 (DNS rebinding); on a network, any."""
    return list(LOOPBACK) if host in LOOPBACK else ["*"]


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the run starts so a taken port fails at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


class WebServer:
    """uvicorn serving `app` on `sock` in a daemon thread until stop()."""

    def __init__(self, app, sock: socket.socket):
        import uvicorn

        config = uvicorn.Config(app, log_level="error", access_log=False, lifespan="on", timeout_graceful_shutdown=2,
                                ws="none")
        self.server = uvicorn.Server(config)
        self.sock = sock
        self.thread = threading.Thread(target=self._serve, name="jobqueue-demo serve", daemon=True)
        self.failure: BaseException | None = None

    def _serve(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except BaseException as exc:  # told by start() or stop(), on the main thread
            self.failure = exc

    def start(self) -> None:
        self.thread.start()
        while not self.server.started and self.thread.is_alive():
            self.thread.join(0.01)
        if not self.server.started:
            from ..errors import ServerError

            raise ServerError(f"the web server did not start: {self.failure}")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()
