"""Step mode and the columns view in a real terminal (tmux) at 60, 80 and 120 columns.

tmux draws what a projector would show: the test reads the screen back with capture-pane.
Each test has its own tmux server (-L), so nothing touches a user's tmux. `make test`
installs tmux when it is missing.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import LOCAL_DSN, LOCAL_PG_DSN, ROOT, dsn_of, scratch_databases
from jobqueue_demo.render.columns import cells

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make test installs it)")


class Tmux:
    def __init__(self, width: int, command: list[str], folder):
        self.socket = f"jqd-test-{os.getpid()}-{time.monotonic_ns()}"
        # The pane must outlive the command, so the screen and exit status can still be read.
        self.config = folder / "tmux.conf"
        self.config.write_text("set -g remain-on-exit on\nset -g history-limit 5000\n")
        # tmux may leave the finished command unreaped for a while (its exit status unknown),
        # so the shell writes the status itself; `trap true INT` keeps it alive past a Ctrl-C
        # meant for the command, without making the command ignore SIGINT.
        self.status_file = folder / "status"
        script = (f"cd {shlex.quote(str(ROOT))}; trap true INT; " + " ".join(shlex.quote(c) for c in command)
                  + f"; echo $? > {shlex.quote(str(self.status_file))}")
        self.tmux("new-session", "-d", "-x", str(width), "-y", "50", "-s", "t", f"bash -c {shlex.quote(script)}")

    def tmux(self, *args: str) -> str:
        command = ["tmux", "-L", self.socket, "-f", str(self.config), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self) -> str:
        # -J joins lines the terminal wrapped: a line wider than the screen shows as one.
        return self.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-2000")

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not on screen:\n{self.screen()}")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def exit_status(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status_file.exists() and self.status_file.read_text().strip():
                return int(self.status_file.read_text())
            time.sleep(0.05)
        raise AssertionError("the command did not end:\n" + self.screen())

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
        path = Path(f"/tmp/tmux-{os.getuid()}") / self.socket
        path.unlink(missing_ok=True)


@pytest.fixture
def tmux(tmp_path):
    started = []

    def start(width: int, *args: str) -> Tmux:
        # COLUMNS, when set (pytest sets it), would win over the terminal's own size.
        term = Tmux(width, ["env", "-u", "COLUMNS", "-u", "LINES", "NO_COLOR=1", sys.executable, "-m", "jobqueue_demo", *args], tmp_path)
        started.append(term)
        return term

    yield start
    for term in started:
        term.close()


def flat(text: str) -> str:
    """The text with every run of blanks and line breaks one space: what reads the same wherever it wrapped."""
    return " ".join(text.split())


def drawn(screen: str) -> list[str]:
    return [line.rstrip() for line in screen.rstrip("\n").splitlines() if not line.startswith("Pane is dead")]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_columns_on_a_terminal(tmux, embedded, width):
    term = tmux(width, "run", "outbox", "--layout", "columns", "--dsn", dsn_of(embedded))
    assert term.exit_status() == 0, term.screen()
    lines = drawn(term.screen())
    text = "\n".join(lines)
    assert lines[0].startswith("-- Work outside the database needs retries")
    if width < 120:  # 4 sessions need 89 columns
        assert f"-- columns: 4 sessions in {width} columns leave" in flat(text) and "showing the transcript" in flat(text)
        assert "│" not in text and "mail> INSERT INTO emails_sent" in text
        return
    assert max(cells(line) for line in lines) <= width  # the title wraps too
    assert "─┼─" in text and " │ " in text
    assert "First without a cure. A claims job 1 and sends the email straight away." in text
    assert "Query OK, 1 row affected" in text


@pytest.mark.parametrize("width", [60, 80, 120])
def test_step_mode_on_a_terminal(tmux, embedded, width):
    term = tmux(width, "run", "for-update-waits", "--step", "--layout", "columns", "--dsn", dsn_of(embedded))
    term.wait_for("[Enter] run it")
    for _ in range(5):
        term.keys("Enter")
        time.sleep(0.15)
    screen = term.wait_for("waiting")
    lines = drawn(screen)
    assert max(cells(line) for line in lines if not line.startswith("-- ")) <= width
    assert "A> BEGIN;" in screen and "B> SELECT" in screen
    term.keys("q")
    assert term.exit_status() == 0
    assert "quit before step" in flat(term.screen()) and "sessions rolled back, scratch database dropped" in flat(term.screen())


def test_ctrl_c_in_step_mode_gives_the_same_summary_as_q(tmux, embedded):
    before = scratch_databases(embedded)
    term = tmux(80, "run", "skip-locked", "--step", "--dsn", dsn_of(embedded))
    term.wait_for("-- step 1/14")
    term.keys("Enter")
    term.wait_for("-- step 2/14")
    term.keys("C-c")
    assert term.exit_status() == 130
    screen = term.screen()
    assert "-- interrupted (Ctrl-C) before step 2 of 14: sessions rolled back, scratch database dropped" in flat(screen)
    assert "Traceback" not in screen
    assert scratch_databases(embedded) == before


# Every view, one after another in one terminal: the transcript (a MariaDB error longer than
# 80 columns among it), step mode, the columns view (or its fallback), show, lessons, a
# --matrix table, compare (on the local PostgreSQL), explore's report and bench's table.
VIEWS = (
    ("run", "skip-locked"),
    ("run", "deadlock"),
    ("run", "stalled-worker"),  # its lock list, our own table: 84 columns once, at any width
    ("run", "skip-locked", "--step", "--pace", "0.01"),
    ("run", "outbox", "--layout", "columns"),
    ("show", "skip-locked-explore"),
    ("lessons",),
    ("run", "gap-locks", "--matrix", "isolation=read-committed,repeatable-read"),
    ("compare", "nowait"),
    ("explore", "claim-without-lock-explore", "--max-schedules", "30"),
    ("bench", "--jobs", "20", "--workers", "2", "--strategies", "skip-locked,for-update", "--isolation", "read-committed",
     "--work-ms", "0", "--plot", ""),
)
# Words the terminal used to cut at 80 columns (`throwawa`/`y`, `skip-l`/`ocked-explore`, ...).
WHOLE = ("skipped without waiting", "skip-locked-explore", "try restarting transaction", "jobs/s")


def views_script(folder, dsn: str):
    """One shell script running every view in turn, each followed by a marker line."""
    program = ["env", "-u", "COLUMNS", "-u", "LINES", "NO_COLOR=1", sys.executable, "-m", "jobqueue_demo"]
    script = folder / "views.sh"
    servers = {"show": (), "lessons": (), "compare": ("--dsn", dsn, "--dsn", LOCAL_PG_DSN)}
    commands = [[*program, *view, *servers.get(view[0], ("--dsn", dsn))] for view in VIEWS]
    script.write_text("".join(f"{shlex.join(c)}\necho '== done {i}'\n" for i, c in enumerate(commands)))
    return script


def words(text: str) -> set[str]:
    """The words of `text` that carry no figure (timings and ids differ from run to run)."""
    return {w for w in re.findall(r"[A-Za-z][\w'.-]*[\w]", text) if not any(c.isdigit() for c in w)}


def cut_words(lines: list[str], known: set[str]) -> list[str]:
    """Where a line ends inside a word that the next line goes on with: the two pieces make a
    word the unwrapped output has, and one of them is no word of it."""
    cut = []
    for a, b in zip(lines, lines[1:]):
        end, start = re.search(r"[A-Za-z][\w'.-]*$", a), re.match(r"\s*(\w[\w'.-]*)", b)
        if end and start:
            head, tail = end.group(0), start.group(1)
            if head + tail in known and not (head in known and tail in known):
                cut.append(f"{head}/{tail}")
    return cut


@pytest.fixture(scope="module")
def piped_words(tmp_path_factory, local, pg_local):
    """Every view's words as a pipe gets them, unwrapped: a word cut on the terminal is not among them."""
    script = views_script(tmp_path_factory.mktemp("piped"), LOCAL_DSN)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout.count("== done") == len(VIEWS), done.stdout + done.stderr
    return words(done.stdout + done.stderr)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_every_view_wraps_at_words_within_the_terminal(tmp_path, piped_words, width):
    # The local server: an embedded one's socket path is a word longer than 60 columns.
    term = Tmux(width, ["bash", str(views_script(tmp_path, LOCAL_DSN))], tmp_path)
    try:
        assert term.exit_status(timeout=90) == 0, term.screen()
        lines = [line.rstrip() for line in term.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-5000").splitlines()]
    finally:
        term.close()
    text = "\n".join(lines)
    assert text.count("== done") == len(VIEWS), text
    too_long = [line for line in lines if cells(line) > width]
    assert too_long == [], "\n".join(too_long)
    assert cut_words(lines, piped_words) == []
    joined = flat(text)
    for phrase in WHOLE:
        assert phrase in joined
    # Narration is prose: the source's line breaks are gone, and a paragraph reads on.
    assert "A marks job 1 done and commits. B explicitly rolls back, releasing its claim on job 2." in joined
    bench_heads = [line for line in lines if re.match(r" +isolation +\| +strategy +\| workers \|", line)]
    assert len(bench_heads) >= 2, text  # bench's table (169 characters a row before), cut into several


def test_verify_wraps_its_report_within_the_terminal(tmp_path, local):
    """verify printed `<path>: ok (12 expectation(s))` whole, past a 60-column edge."""
    folder = tmp_path / "lessons-kept-for-the-class"
    folder.mkdir()
    lesson = folder / "nowait.yaml"
    lesson.write_text((ROOT / "scenarios" / "nowait.yaml").read_text())
    program = ["env", "-u", "COLUMNS", "-u", "LINES", "NO_COLOR=1", sys.executable, "-m", "jobqueue_demo"]
    term = Tmux(60, [*program, "verify", str(lesson), "--dsn", LOCAL_DSN], tmp_path)
    try:
        assert term.exit_status() == 0, term.screen()
        lines = drawn(term.screen())
    finally:
        term.close()
    assert [line for line in lines if cells(line) > 60] == []
    # The path alone is wider than the line: it is the one word cut.
    assert "".join(f"{lesson}: ok (7 expectation(s))".split()) in "".join("".join(lines).split())
    assert any(line.startswith("Verified against ") for line in lines)


def test_a_usage_error_wraps_within_the_terminal(tmux):
    """Click printed "Error: Invalid value for '--sample': 0 is not in the range x>=1." whole."""
    term = tmux(60, "explore", "nowait", "--sample", "0")
    assert term.exit_status() == 2
    lines = drawn(term.screen())
    assert [line for line in lines if cells(line) > 60] == []
    assert "Error: Invalid value for '--sample': 0 is not in the range x>=1." in flat("\n".join(lines))
