"""Teaching views on real servers: step-through in a pseudo-terminal, pacing, the columns
diagram, JSON events, and lesson pages (HTML rendered in headless Chromium, Markdown)."""

from __future__ import annotations

import fcntl
import html
import io
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from datetime import date
from pathlib import Path

import pytest

from conftest import ROOT, cli, dsn_of, scratch_databases
from jobqueue_demo import api as core
from jobqueue_demo.render.columns import ColumnsView, cells, wrap
from jobqueue_demo.render.events_json import records
from jobqueue_demo.render.export import fence

SEED = str(ROOT / "scenarios" / "skip-locked.yaml")
# The shipped lessons change as they are written; the wait tests keep a schedule of their own.
WAITS_YAML = """\
title: B waits for A's row lock
sessions: [A, B]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY, state VARCHAR(20) NOT NULL DEFAULT 'queued') ENGINE=InnoDB;
  INSERT INTO jobs (id) VALUES (1), (2);
steps:
  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE;
  - B: BEGIN;
  - B: SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE;
    comment: job 1 is locked by A
    expect:
      waits: true
      rows:
        - [2]
  - narrate: B's claim cannot skip job 1, so it waits. A finishes job 1 and commits, which releases the lock.
  - A: UPDATE jobs SET state = 'done' WHERE id = 1;
  - A: COMMIT;
  - B: COMMIT;
"""
DEADLOCK = str(ROOT / "scenarios" / "deadlock.yaml")
GOLDEN = Path(__file__).parent / "golden" / "skip-locked.txt"
# The same transcript on an 80-column terminal: narration reflowed, a comment that does not fit below its statement.
GOLDEN_80 = Path(__file__).parent / "golden" / "skip-locked-80.txt"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# What the step prompt writes to take itself back once a key is pressed.
ERASE = re.compile(r"\r(\x1b\[\d+A)?\x1b\[J")


def run_events(path: str, info) -> list:
    return core.run(core.load(path), info, 10.0).events


def columns_text(events, sessions, width: int) -> list[str]:
    out = io.StringIO()
    view = ColumnsView(out, sessions, width, color=False)
    for event in events:
        view.write(event)
    return out.getvalue().splitlines()


def loose(text: str) -> str:
    """A pattern for `text` wherever it was wrapped."""
    return r"\s+".join(re.escape(word) for word in text.split())


def scalar(info, sql: str, *args) -> int:
    conn = info.params.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(sql, args)
        return int(cursor.fetchone()[0])
    finally:
        conn.close()


# -- the pseudo-terminal ------------------------------------------------------------


class Terminal:
    """The CLI on a pseudo-terminal of a given size: keys in, screen text out."""

    def __init__(self, *args: str, columns: int = 80, env: dict | None = None):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        full_env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "JOBQUEUE_DEMO_DSN")}
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobqueue_demo", *args],
            stdin=slave, stdout=slave, stderr=slave, env=full_env, cwd=ROOT, start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.raw = ""
        self.seen = 0

    @property
    def text(self) -> str:
        """The screen's text; an erased prompt stays, as lines of its own, so offsets only grow."""
        return ANSI.sub("", ERASE.sub("\n", self.raw)).replace("\r", "")

    @property
    def screen(self) -> str:
        """What stays in the terminal: each erased prompt taken back, as a terminal does."""
        out = ""
        parts = ERASE.split(self.raw)
        # split() interleaves the text between erases with each erase's optional "cursor up".
        for i in range(0, len(parts), 2):
            out += ANSI.sub("", parts[i]).replace("\r", "")
            if i + 1 < len(parts):
                up = int(parts[i + 1][2:-1]) if parts[i + 1] else 0
                out = out[: _line_start(out, up)]
        return out

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.raw += data.decode("utf-8", "replace")
        return bool(data)

    def expect(self, pattern: str, timeout: float = 30.0) -> re.Match:
        """Wait for `pattern` in what appeared since the last expect; return the match."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.compile(pattern).search(self.text, self.seen)
            if found:
                self.seen = found.end()
                return found
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(f"{pattern!r} never appeared; screen so far:\n{self.text}")

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def finish(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.2) and time.monotonic() < deadline:
            pass
        try:
            return self.proc.wait(max(0.1, deadline - time.monotonic()))
        finally:
            os.close(self.master)

    def stop(self) -> None:
        """After a failed test: Ctrl-C first, so the run still cleans up after itself."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _line_start(text: str, up: int) -> int:
    """Where the line `up` lines above the last one starts."""
    end = len(text)
    for _ in range(up + 1):
        end = text.rfind("\n", 0, end)
        if end < 0:
            return 0
    return end + 1


@pytest.fixture(scope="module")
def waits(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("scenarios") / "waits.yaml"
    path.write_text(WAITS_YAML)
    return str(path)


@pytest.fixture
def terminal():
    started = []

    def start(*args, **kwargs) -> Terminal:
        term = Terminal(*args, **kwargs)
        started.append(term)
        return term

    yield start
    for term in started:
        term.stop()


# -- --step and --pace ----------------------------------------------------------------


def test_step_enter_advances_and_q_leaves_nothing_behind(server, terminal):
    term = terminal("run", "skip-locked", "--step", "--dsn", dsn_of(server), env={"NO_COLOR": "1"})
    database = term.expect(r"scratch database (jqd_\w+)").group(1)
    term.expect(r"-- step 1/14, next: A> BEGIN;\n   \[Enter\] run it   \[q\] quit")
    # The runner is held inside the gate: step 1 has not run, its table is set up.
    assert "Query OK" not in term.text
    assert database in scratch_databases(server)
    term.send("\r")
    term.expect(r"A> BEGIN;\nQuery OK\n")
    term.expect(loose("-- step 2/14, next: A> SELECT id, task FROM jobs WHERE state = 'queued' ORDER BY id "
                      "LIMIT 1 FOR UPDATE SKIP LOCKED; [Enter] run it"))
    term.send("\r")
    term.expect(r"  1 \| send welcome email\n\(1 row\)\n")
    term.expect(r"-- step 3/14, next: B> BEGIN;")
    assert "B> BEGIN;\nQuery OK" not in term.text
    term.send("q")
    term.expect(r"quit before step 3 of 14: sessions rolled back, scratch database dropped")
    assert term.finish() == 0
    assert database not in scratch_databases(server)
    # Each prompt took itself back: what stays on screen is the plain transcript.
    assert "[Enter]" not in term.screen
    assert "A> BEGIN;\nQuery OK\nA> SELECT id, task FROM jobs WHERE state = 'queued'\n" in term.screen


def step_until_b_waits(term: Terminal) -> str:
    """Press Enter through the `waits` scenario's first four steps; the scratch database's name."""
    database = term.expect(r"scratch database (jqd_\w+)").group(1)
    for _ in range(4):
        term.expect(r"-- step \d+/8, next: .*\n(.*\n)*?   \[Enter\] run it")
        term.send("\n")
    term.expect(r"waiting for a row lock held by A")
    term.expect(loose("-- step 5/8 (B waiting on a lock), next: (narration) B's claim cannot skip job 1"))
    return database


def test_step_quit_while_a_statement_waits_kills_it_and_drops_everything(server, terminal, waits):
    term = terminal("run", waits, "--step", "--dsn", dsn_of(server), env={"NO_COLOR": "1"})
    database = step_until_b_waits(term)
    assert scalar(server, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = %s", database) >= 2
    term.send("q")
    assert term.finish() == 0
    assert database not in scratch_databases(server)
    assert scalar(server, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = %s", database) == 0


def test_ctrl_c_at_a_prompt_exits_130_and_cleans_up(embedded, terminal, waits):
    term = terminal("run", waits, "--step", "--dsn", dsn_of(embedded), env={"NO_COLOR": "1"})
    database = step_until_b_waits(term)
    term.proc.send_signal(signal.SIGINT)
    assert term.finish() == 130
    # The same summary as `q` gives.
    assert re.search(loose("-- interrupted (Ctrl-C) before step 5 of 8: sessions rolled back, scratch database dropped"), term.text)
    assert database not in scratch_databases(embedded)
    assert "Traceback" not in term.text and "Exception ignored" not in term.text


def test_step_with_pace_runs_on_without_keys(embedded, terminal):
    term = terminal("run", "skip-locked", "--step", "--pace", "0.02", "--dsn", dsn_of(embedded), env={"NO_COLOR": "1"})
    assert term.finish() == 0, term.text
    assert "[Enter] run it" in term.text
    screen = term.screen
    assert screen[screen.index("A> BEGIN;"):].strip() == GOLDEN_80.read_text().strip()


WAIT_STEPS = """\
title: one wait that waits, one that has nothing to wait for
sessions:
  A:
  B: {innodb_lock_wait_timeout: 1}
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY) ENGINE=InnoDB;
  INSERT INTO jobs VALUES (1);
steps:
  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
  - B: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
  - wait: B
  - A: COMMIT;
  - wait: A
  - A: SELECT 1;
"""


def test_step_holds_a_wait_only_while_its_session_waits(embedded, tmp_path):
    """`wait: A` after A's statement ended does nothing: no prompt for it, no Enter that prints nothing."""
    from jobqueue_demo.render.stepper import Keys, Pacing, StepGate

    path = tmp_path / "wait-steps.yaml"
    path.write_text(WAIT_STEPS)
    keys_in, keys_out = os.pipe()
    os.write(keys_out, b"\n" * 10)
    prompt = io.StringIO()
    try:
        gate = StepGate(Pacing(True, None), 7, Keys(keys_in), prompt, 200)
        core.run(core.load(str(path)), embedded, 10.0, gate)
    finally:
        os.close(keys_in)
        os.close(keys_out)
    held = re.findall(r"-- step (\d)/7.*?, next: (.*)", prompt.getvalue())
    assert [int(n) for n, _ in held] == [1, 2, 3, 4, 5, 7]
    assert held[3][1] == "wait until B's statement ends"


def test_pace_spaces_the_steps_out(embedded):
    done = cli("run", "skip-locked", "--pace", "0.1", "--format", "json", "--dsn", dsn_of(embedded))
    assert done.returncode == 0, done.stderr
    times = [r["time_ms"] for r in map(json.loads, done.stdout.splitlines()) if r["event"] == "statement"]
    assert len(times) == 12
    # Each statement runs a pace after the step before it (a narration step adds one more).
    assert all(b - a >= 100 for a, b in zip(times, times[1:]))


# -- columns -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_events(embedded):
    return run_events(SEED, embedded)


def test_columns_of_the_seed_fit_80_columns(seed_events):
    lines = columns_text(seed_events, ("A", "B"), 80)
    assert max(cells(l) for l in lines) <= 80
    assert lines[0].split() == ["A", "|", "B"]
    # Two columns of 38 cells and a 3-cell separator make 79.
    assert lines[2] == "A> BEGIN;".ljust(38) + " |"
    assert lines[lines.index("(1 row)".ljust(38) + " |") + 1] == " " * 38 + " | B> BEGIN;"
    # The long claim wraps under its prompt instead of running past the edge.
    assert "A> SELECT id, task FROM jobs WHERE     |" in lines
    assert "   state = 'queued'                    |" in lines
    assert any("  1 | send welcome email" in l for l in lines)
    assert any(l.startswith("A marks job 1 done and commits.") for l in lines)


@pytest.mark.parametrize("width", [43, 60, 80, 132])  # 43: the narrowest with two columns
def test_columns_never_exceed_the_width(seed_events, width):
    lines = columns_text(seed_events, ("A", "B"), width)
    assert max(cells(l) for l in lines) <= width
    assert max(cells(l) for l in lines) > width - 10  # and the width is used


def test_columns_cli_piped_is_plain_and_fits(embedded):
    done = cli("run", "skip-locked", "--layout", "columns", "--dsn", dsn_of(embedded), env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stdout
    heading, *lines = done.stdout.splitlines()  # the heading names the server, wrapped by the terminal
    assert heading.startswith("-- A job queue on FOR UPDATE SKIP LOCKED: on ")
    assert max(cells(l) for l in lines) <= 80
    assert "B> ROLLBACK;" in done.stdout and " | " in lines[0]


def test_columns_waiting_statement_stays_marked_until_it_completes(server, waits):
    lines = columns_text(run_events(waits, server), ("A", "B"), 80)
    right = [l[41:] for l in lines]
    waits = next(i for i, r in enumerate(right) if r.startswith("-- waiting for a row lock held by A"))
    done = next(i for i, r in enumerate(right) if r.startswith("B> <... completed after"))
    between = range(waits + 2, done)  # the wait phrase wraps onto a second line
    assert len(between) > 5
    # Narration spans the whole width between rows; every row of columns keeps the marker.
    rows = [i for i in between if " | " in lines[i]]
    assert len(rows) > 3 and all(right[i].startswith(":") for i in rows), "\n".join(lines[waits:done + 1])
    assert any(lines[i] and " | " not in lines[i] for i in between)  # the narration, whole
    assert any("A> COMMIT;" in lines[i] for i in between)
    assert right[done + 1:done + 4] == [" id", "----", "  2"]
    assert not any(r.startswith(":") for r in right[done:])


def test_columns_on_a_terminal_use_rich_and_fit(embedded, terminal):
    term = terminal("run", "skip-locked", "--layout", "columns", "--dsn", dsn_of(embedded))
    assert term.finish() == 0, term.text
    assert "\x1b[1;36m" in term.raw or "\x1b[36;1m" in term.raw  # A's SQL in bold cyan
    lines = [l for l in term.text.splitlines() if l and not l.startswith("-- ")]
    assert max(cells(l) for l in term.text.splitlines()) <= 80  # the title wraps too
    assert "─┼─" in next(l for l in lines if "─" in l) and "│ B> BEGIN;" in term.text


def test_wrap_keeps_the_hanging_indent_and_folds_long_words():
    assert wrap("A> SELECT a FROM t WHERE x = 1", 14, "   ") == ["A> SELECT a", "   FROM t", "   WHERE x = 1"]
    assert wrap("   " + "x" * 20, 12, "   ") == ["   xxxxxxxxx", "   xxxxxxxxx", "   xx"]


# -- JSON events ------------------------------------------------------------------------


def test_json_events_show_the_wait_start_end_and_blocker(server, waits):
    done = cli("run", waits, "--format", "json", "--dsn", dsn_of(server))
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [r["event"] for r in out]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    start = next(r for r in out if r["event"] == "wait_start")
    end = next(r for r in out if r["event"] == "wait_end")
    assert (start["step"], start["session"], start["blockers"], start["lock_kind"]) == (4, "B", ["A"], "row lock")
    assert start["statement"].startswith("SELECT id FROM jobs")
    commit = next(r for r in out if r["event"] == "statement" and r["statement"] == "COMMIT;")
    assert kinds.index("wait_start") < out.index(commit) < kinds.index("wait_end")
    assert end["time_ms"] >= start["time_ms"] and end["waited_ms"] > 0 and end["blockers"] == ["A"]
    claimed = out[kinds.index("wait_end") + 1]
    assert claimed["result"]["rows"] == [["2"]] and claimed["waited_ms"] == end["waited_ms"]


def test_json_events_carry_errors_by_number_and_name(server):
    out = [r for e in run_events(DEADLOCK, server) for r in records(e)]
    errors = [r for r in out if r["event"] == "statement" and "error" in r]
    assert [(r["error"]["errno"], r["error"]["name"]) for r in errors] == [(1213, "ER_LOCK_DEADLOCK")]
    assert all(isinstance(r["time_ms"], float) for r in out if "time_ms" in r)


def test_json_with_columns_is_a_usage_error():
    done = cli("run", "skip-locked", "--format", "json", "--layout", "columns")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "jobqueue-demo: --layout columns is a text layout; leave it out with --format json"
    ]


# -- lesson pages -------------------------------------------------------------------------

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium() -> str:
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it needs root (apt-get install chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "chromium"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        failed = subprocess.run(install, env=env, capture_output=True, text=True)
        if failed.returncode != 0:
            pytest.skip(f"could not install chromium: {failed.stderr.strip()[-300:]}")
    return shutil.which("chromium") or pytest.skip("chromium installed but not on PATH")


def browse(chromium: str, page: Path, *action: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *action, page.as_uri()],
            capture_output=True, text=True, timeout=120,
        )


def test_html_page_renders_in_chromium_with_the_transcript(server, chromium, tmp_path):
    page = tmp_path / "skip-locked.html"
    done = cli("export", "skip-locked", "-o", str(page), "--dsn", dsn_of(server))
    assert done.returncode == 0, done.stderr
    source = page.read_text()
    # Nothing is fetched: no links, scripts, imports or urls to load.
    assert not re.search(r"https?:|<script|<link|<img|@import|url\(", source, re.IGNORECASE)
    shot = tmp_path / "skip-locked.png"
    taken = browse(chromium, page, f"--screenshot={shot}", "--window-size=1200,2000")
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    dom = browse(chromium, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = html.unescape(re.sub(r"<[^>]+>", "", dom.stdout))
    for want in ("A> BEGIN;", "  1 | send welcome email", "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;",
                 "B> ROLLBACK;", "(2 rows)", "A marks job 1 done and commits.", "Why each piece matters",
                 "jobqueue-demo run skip-locked", "title: A job queue on FOR UPDATE SKIP LOCKED"):
        assert want in text, want
    assert f"Verified against {server.label} on {date.today().isoformat()}" in text
    # Each session's lines carry that session's colour class.
    assert re.search(r'<span class="l sql s0">A&gt; BEGIN;', dom.stdout)
    assert re.search(r'<span class="l sql s1">B&gt; BEGIN;', dom.stdout)


def test_markdown_page_has_the_transcript_in_code_blocks(embedded, tmp_path):
    page = tmp_path / "skip-locked.md"
    done = cli("export", "skip-locked", "-o", str(page), "--dsn", dsn_of(embedded))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    blocks = re.findall(r"^```text\n(.*?)\n```$", text, re.MULTILINE | re.DOTALL)
    golden = GOLDEN.read_text().split("\n\n")
    # The golden transcript, with each narration between two code blocks instead.
    assert [b.rstrip("\n") for b in blocks] == [golden[0], golden[2], golden[4].rstrip("\n")]
    assert "> A marks job 1 done and commits." in text
    assert text.startswith("# A job queue on FOR UPDATE SKIP LOCKED\n")
    assert f"Verified against {embedded.label} on {date.today().isoformat()}" in text
    assert "## Why each piece matters" in text and "```sh\njobqueue-demo run skip-locked\n" in text
    assert "```yaml\ntitle: A job queue on FOR UPDATE SKIP LOCKED\n" in text


def test_export_refuses_a_run_that_misses_its_expectations(embedded, tmp_path):
    scenario = tmp_path / "wrong.yaml"
    scenario.write_text(Path(SEED).read_text().replace("- [2, generate invoice]", "- [3, nothing]", 1))
    page = tmp_path / "wrong.html"
    done = cli("export", str(scenario), "-o", str(page), "--dsn", dsn_of(embedded))
    assert done.returncode == 1
    assert "expected: columns [id, task], rows [[3, nothing]]" in done.stderr
    assert "got:      columns [id, task], rows [[2, generate invoice]]" in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("1 expectation(s) not met on " + embedded.label + "; no page written")
    assert list(tmp_path.iterdir()) == [scenario]


def test_export_to_a_missing_folder_fails_before_running(tmp_path):
    done = cli("export", "skip-locked", "-o", str(tmp_path / "nope" / "x.html"), "--dsn", "mysql://root@127.0.0.1:1/")
    assert done.returncode == 2
    assert done.stderr.strip() == f"jobqueue-demo: {tmp_path / 'nope' / 'x.html'}: no such directory {tmp_path / 'nope'}"


def test_fence_outlasts_backticks_in_the_text():
    assert fence("SELECT `id` FROM ```t```", "text").startswith("````text\n")
    assert fence("plain", "sh") == "```sh\nplain\n```"


def test_columns_show_a_table_too_wide_for_its_column_expanded():
    from jobqueue_demo.render.columns import rows_lines

    columns = ("id", "select_type", "possible_keys", "key")
    rows = (("1", "SIMPLE", None, "PRIMARY"),)
    assert [l.text for l in rows_lines("A", columns, (True, False, False, False), rows, 60)] == [
        " id | select_type | possible_keys |   key   ", "----+-------------+---------------+---------",
        "  1 | SIMPLE      |               | PRIMARY", "(1 row)",
    ]
    assert [l.text for l in rows_lines("A", columns, (True, False, False, False), rows, 30)] == [
        "-[ RECORD 1 ]-+--------", "id            | 1", "select_type   | SIMPLE", "possible_keys |",
        "key           | PRIMARY",
    ]
