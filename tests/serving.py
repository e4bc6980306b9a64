"""A served lesson as the tests (and bench/bench_serve_latency.py) drive it: the installed
command in its own process, its pages in Debian's chromium through Playwright."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADDRESS = re.compile(r"^(students|teacher): (http://\S+)$")


class Served:
    """`jobqueue-demo serve ARGS` with its terminal a pipe: `press()` is the teacher's Enter."""

    def __init__(self, *args: str, dsn: str | None = None):
        env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
        env["NO_COLOR"] = "1"
        if dsn:
            env["JOBQUEUE_DEMO_DSN"] = dsn
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jobqueue_demo", "serve", *args, "--port", "0"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )
        self.addresses: dict[str, str] = {}
        self.head: list[str] = []
        while len(self.addresses) < 2:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"serve ended before its addresses: {self.process.stderr.read()}")
            self.head.append(line)
            found = ADDRESS.match(line.strip())
            if found:
                self.addresses[found.group(1)] = found.group(2)
        # Read on as it prints: a transcript left in a full pipe would hold the run, as a
        # terminal nobody scrolls would.
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers = [threading.Thread(target=lambda s=stream, into=into: into.extend(s), daemon=True)
                         for stream, into in ((self.process.stdout, self._out), (self.process.stderr, self._err))]
        for reader in self._readers:
            reader.start()
        self.out = ""
        self.err = ""

    @property
    def students(self) -> str:
        return self.addresses["students"]

    @property
    def teacher(self) -> str:
        return self.addresses["teacher"]

    @property
    def token(self) -> str:
        return self.teacher.split("teacher=", 1)[1]

    def press(self, keys: str = "\n") -> None:
        self.process.stdin.write(keys)
        self.process.stdin.flush()

    def post(self, path: str) -> tuple[int, str]:
        request = urllib.request.Request(self.students.rstrip("/") + path, method="POST", data=b"")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path: str) -> tuple[int, dict, str]:
        try:
            with urllib.request.urlopen(self.students.rstrip("/") + path, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode()

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def finish(self, timeout: float = 60) -> int:
        """Close its terminal (the end of input ends the lesson) and wait for it."""
        try:
            self.process.stdin.close()
        except BrokenPipeError:  # it has ended already
            pass
        self.process.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        self.out, self.err = "".join(self.head + self._out), "".join(self._err)
        return self.process.returncode

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def browser(playwright, executable: str | None = None):
    """Debian's chromium (`make install`): Playwright never downloads a browser of its own here."""
    path = executable or shutil.which("chromium") or "/usr/bin/chromium"
    return playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])


def at_step(page, step: int, timeout: float = 20_000) -> None:
    """Until the page shows step `step` (0-based) settled: ready for the next, or the end."""
    page.wait_for_function(
        "([step]) => Number(document.body.dataset.at) >= step && document.body.dataset.phase !== 'running'",
        arg=[step], timeout=timeout,
    )
