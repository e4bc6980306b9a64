"""The deadlock lab: the cycle a 1213 broke, read from the server's LATEST DETECTED DEADLOCK
and shown in the transcript, the JSON events and the lesson page."""

from __future__ import annotations

import html
import json
import re

from conftest import ROOT, cli, dsn_env, dsn_of
from test_teaching import browse, chromium  # noqa: F401  chromium is a fixture

from jobqueue_demo import api as core
from jobqueue_demo.engine.mysql.deadlock import latest_deadlock
from jobqueue_demo.engine.types import GAP_ONLY as GAP
from jobqueue_demo.engine.types import INSERT_INTENTION_ONLY as INSERT_INTENTION
from jobqueue_demo.engine.types import NEXT_KEY, RECORD
from jobqueue_demo.run import events as ev

DATA = ROOT / "tests" / "data"
INT_KEYS = {("jobs", "PRIMARY"): "int(11)"}


def test_mariadb_row_deadlock_is_read_as_a_cycle():
    cycle = latest_deadlock((DATA / "innodb-deadlock-rows.txt").read_text(), INT_KEYS)
    assert cycle.victim == 1
    first, second = cycle.parties
    assert (first.blocked_by, second.blocked_by) == (2, 1)
    assert first.thread_id != second.thread_id
    assert first.statement == "UPDATE jobs SET state='done' WHERE task='a'"
    assert (first.waits_for.index, first.waits_for.mode, first.waits_for.kind, first.waits_for.record) == (
        "PRIMARY", "X", NEXT_KEY, "1")
    # What the second holds is what the first waits for: the record lock on key 1.
    assert (second.held.kind, second.held.record) == (RECORD, "1")
    assert (first.held.kind, first.held.record) == (RECORD, "2")


def test_insert_intention_against_a_gap_lock_on_the_supremum():
    cycle = latest_deadlock((DATA / "innodb-deadlock-insert-intention.txt").read_text(), INT_KEYS)
    for party in cycle.parties:
        assert (party.waits_for.kind, party.waits_for.record) == (INSERT_INTENTION, "supremum")
        assert (party.held.kind, party.held.record) == (GAP, "supremum")
    assert cycle.parties[0].waits_for.text() == "X insert intention lock on jobs PRIMARY before supremum"


def test_mysql_84_form_from_the_manual():
    """Written from the MySQL 8.4 manual's example; no MySQL server runs here."""
    keys = {("Animals", "PRIMARY"): "varchar(10)", ("Birds", "PRIMARY"): "varchar(10)"}
    cycle = latest_deadlock((DATA / "innodb-deadlock-mysql84.txt").read_text(), keys)
    assert cycle.victim == 2
    first, second = cycle.parties
    assert (first.thread_id, second.thread_id) == (46, 45)
    assert (first.blocked_by, second.blocked_by) == (2, 1)
    assert first.waits_for.text() == "X record lock on Animals PRIMARY ('Aardvark')"
    assert (second.held.mode, second.held.kind, second.held.record) == ("S", RECORD, "'Aardvark'")
    named = cycle.named({46: "A", 45: "B"})
    assert named.lines()[0] == "deadlock: B -> A -> B; the server rolled back B"


def test_no_deadlock_or_an_unreadable_one_is_none():
    text = (DATA / "innodb-deadlock-rows.txt").read_text()
    assert latest_deadlock(text.replace("LATEST DETECTED DEADLOCK", "TRANSACTIONS")) is None
    assert latest_deadlock(text.replace("*** WE ROLL BACK TRANSACTION (1)", "")) is None
    assert latest_deadlock(text.replace("MariaDB thread id", "thread")) is None
    # Without the key's type the bytes are shown as stored, not guessed at.
    assert latest_deadlock(text).parties[0].waits_for.record == "0x80000001"


def _victim(report) -> ev.Completed:
    (victim,) = [e for e in report.events if isinstance(e, ev.Completed) and e.deadlock is not None]
    return victim


def test_deadlock_lesson_shows_the_cycle(server):
    report = core.run(core.load("deadlock"), server, 10.0)
    assert report.mismatches == []
    victim = _victim(report)
    cycle = victim.deadlock
    assert victim.session == "B" and cycle.name(cycle.victim) == "B"
    by_session = {p.session: p for p in cycle.parties}
    assert set(by_session) == {"A", "B"}
    assert (by_session["B"].waits_for.table, by_session["B"].waits_for.record) == ("jobs", "1")
    assert cycle.name(by_session["B"].blocked_by) == "A" and cycle.name(by_session["A"].blocked_by) == "B"
    done = cli("run", "deadlock", env=dsn_env(server))
    lines = done.stdout.splitlines()
    at = lines.index("-- deadlock: B -> A -> B; the server rolled back B")
    assert lines[at + 1].startswith("--   B waited for X ") and "lock on jobs PRIMARY (1), held by A (X " in lines[at + 1]
    assert lines[at + 2].startswith("--   A waited for X ") and "lock on jobs PRIMARY (2), held by B (X " in lines[at + 2]


def test_three_transactions_in_one_cycle(embedded):
    report = core.run(core.load(str(DATA / "deadlock-three.yaml")), embedded, 10.0)
    assert report.mismatches == []
    cycle = _victim(report).deadlock
    assert cycle.lines()[0] == "deadlock: C -> A -> B -> C; the server rolled back C"
    assert sorted((p.session, p.waits_for.record, cycle.name(p.blocked_by)) for p in cycle.parties) == [
        ("A", "2", "B"), ("B", "3", "C"), ("C", "1", "A")]


def test_json_events_carry_the_cycle(embedded):
    done = cli("run", "deadlock", "--format", "json", env=dsn_env(embedded))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    at = next(i for i, r in enumerate(records) if r["event"] == "deadlock")
    assert records[at - 1]["event"] == "statement" and records[at - 1]["error"]["errno"] == 1213
    found = records[at]
    assert (found["step"], found["session"], found["victim"]) == (8, "B", "B")
    b = next(t for t in found["transactions"] if t["session"] == "B")
    assert b["blocked_by"] == "A" and b["waits_for"]["record"] == "1" and b["waits_for"]["index"] == "PRIMARY"
    assert b["held"]["record"] == "2"


def test_lesson_page_draws_the_cycle(embedded, chromium, tmp_path):  # noqa: F811
    page = tmp_path / "deadlock.html"
    done = cli("export", "deadlock", "-o", str(page), "--dsn", dsn_of(embedded))
    assert done.returncode == 0, done.stderr
    source = page.read_text()
    assert not re.search(r"https?:(?!//www\.w3\.org/2000/svg)|<script|<link|<img|@import|url\((?!#)", source)
    (figure,) = re.findall(r'<figure class="deadlock">.*?</figure>', source, re.DOTALL)
    assert figure.count("<rect") == 2 and figure.count("marker-end=") == 2
    shot = tmp_path / "deadlock.png"
    taken = browse(chromium, page, f"--screenshot={shot}", "--window-size=1000,1800")
    assert taken.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = browse(chromium, page, "--dump-dom")
    text = html.unescape(re.sub(r"<[^>]+>", "", dom.stdout))
    assert "rolled back (1213)" in text and "on jobs PRIMARY (1)" in text and "A holds it: X next-key lock" in text
    assert "the server rolled back B." in text


def test_another_clients_deadlock_is_not_told_as_ours(embedded):
    """On a shared server the latest deadlock may be someone else's: it must name our victim.
    On the private embedded server, the latest one is the run's own."""
    from contextlib import closing

    from jobqueue_demo.engine.mysql.deadlock import read_deadlock
    from jobqueue_demo.engine.mysql.waits import WaitMonitor

    report = core.run(core.load("deadlock"), embedded, 10.0)
    told = _victim(report).deadlock
    victim = told.party(told.victim)
    with closing(embedded.params.connect(database=None)) as conn:
        monitor = WaitMonitor(conn, embedded.flavor)
        again = read_deadlock(monitor, "jqd_none", {victim.thread_id: "B"}, victim.thread_id)
        assert again is not None and again.name(again.victim) == "B"
        assert read_deadlock(monitor, "jqd_none", {}, victim.thread_id + 1_000_000) is None
