"""`serve`: the lesson as a web page, in a real browser (Debian's chromium through Playwright):
two student pages and the teacher's follow each step; a student cannot step; a reload catches
up; the page neither overlaps nor cuts its text at 1280x720 nor on an 800x600 projector."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from conftest import dsn_of, left_behind, scratch_databases
from serving import Served, at_step, browser
from test_teaching import chromium  # noqa: F401  chromium is a fixture: installs Debian's package when missing

sync_api = pytest.importorskip("playwright.sync_api")

SEED_STEPS = 14


@pytest.fixture
def pages(chromium):  # noqa: F811
    """A function opening a page at an address, in one browser for the test."""
    with sync_api.sync_playwright() as playwright:
        chrome = browser(playwright, chromium)
        opened = []

        def open_page(address: str, width: int = 1280, height: int = 720):
            page = chrome.new_page(viewport={"width": width, "height": height})
            page.goto(address)
            page.wait_for_function("() => Number(document.body.dataset.version) > 0")
            opened.append(page)
            return page

        yield open_page
        chrome.close()


def step_through(teacher, students, steps: int | None = None, each=None) -> None:
    """The teacher's button, `steps` times or to the end; every page shows each step (a
    `wait:` step whose statement has ended already runs at once, with the one before)."""
    done = 0
    while steps is None or done < steps:
        teacher.wait_for_selector("body[data-phase=ready], body[data-phase=over]")
        if teacher.evaluate("() => document.body.dataset.phase") == "over":
            return
        before = int(teacher.evaluate("() => document.body.dataset.at"))
        teacher.click("#step")
        for page in (teacher, *students):
            at_step(page, before + 1)
        done += 1
        if each is not None:
            each(int(teacher.evaluate("() => document.body.dataset.at")))


def column_text(page) -> str:
    return page.inner_text("#columns")


def test_two_students_follow_the_seed_lesson_and_a_reload_catches_up(server, pages):
    before = scratch_databases(server)
    with Served("skip-locked", dsn=dsn_of(server)) as served:
        teacher = pages(served.teacher)
        students = [pages(served.students), pages(served.students, 800, 600)]
        assert teacher.is_visible("#step") and not any(s.is_visible("#step") for s in students)

        def check(step: int) -> None:
            if step == 2:  # A's claim: its row on every page
                for page in (teacher, *students):
                    assert "resize avatar of user 7" in column_text(page) or "1 |" in column_text(page)
            if step == 6:
                students[0].reload()
                at_step(students[0], 6)
                assert students[0].inner_text("#position") == f"step 7 of {SEED_STEPS}"

        step_through(teacher, students, None, check)
        for page in (teacher, *students):
            page.wait_for_selector("body[data-phase=over]")
            assert "Every expectation met" in page.inner_text("#end")
        late = pages(served.students)
        assert late.inner_text("#position") == f"step {SEED_STEPS} of {SEED_STEPS}"
        assert column_text(late) == column_text(students[0])
        status, headers, whole = served.get("/lesson.html")
        assert status == 200 and "<h1>" in whole and "script" not in headers["content-security-policy"]
        assert served.finish() == 0, served.err
    assert "every expectation met" in served.err
    assert left_behind(server, before) == set()


def test_deadlock_lesson_shows_the_wait_and_the_cycle_on_every_page(embedded, pages, tmp_path):
    with Served("deadlock", dsn=dsn_of(embedded)) as served:
        teacher = pages(served.teacher)
        students = [pages(served.students), pages(served.students, 800, 600)]
        seen = {}

        def check(step: int) -> None:
            if step == 6:  # A's UPDATE waits for B's row
                for page in (teacher, *students):
                    waiting = page.inner_text("#columns .waiting")
                    assert "waiting for a row lock held by B" in waiting and "so far" in waiting
                    assert "A waits for B" in page.inner_text("#graph")
                seen["waiting"] = True
            if step in (7, 8) and "cycle" not in seen:  # B closes the cycle (step 8 waits for A, done already): the server's picture of it on every page
                for page in (teacher, *students):
                    figure = page.locator("#columns figure.cycle")
                    assert "Deadlock: A and B each wait for a lock the other holds" in figure.inner_text()
                    page.wait_for_function("() => document.querySelector('figure.cycle img').naturalWidth > 0")
                    assert "waited" in page.inner_text("#columns .waited")
                seen["cycle"] = True

        step_through(teacher, students, None, check)
        assert seen == {"waiting": True, "cycle": True}
        for width, height in ((1280, 720), (800, 600)):
            page = pages(served.students, width, height)
            page.screenshot(path=str(tmp_path / f"deadlock-{width}x{height}.png"), full_page=True)
            assert overlaps_and_cuts(page) == [], (width, height)
        assert served.finish() == 0, served.err


# Every element whose own text the page shows, as far as it is in sight (the run scrolls
# beneath the title and the controls): none may overlap another, none may reach past the
# page's right edge or be cut by its box.
LAYOUT_CHECK = """() => {
  const width = document.documentElement.clientWidth;
  const height = document.documentElement.clientHeight;
  const seen = (e) => {
    let r = e.getBoundingClientRect();
    let box = { left: r.left, right: r.right, top: Math.max(r.top, 0), bottom: Math.min(r.bottom, height) };
    for (let a = e.parentElement; a; a = a.parentElement) {
      if (getComputedStyle(a).overflowY === 'visible') continue;
      const c = a.getBoundingClientRect();
      box.top = Math.max(box.top, c.top);
      box.bottom = Math.min(box.bottom, c.bottom);
    }
    return box;
  };
  const texts = [...document.querySelectorAll('body *')].filter((e) =>
    [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim()) && e.getClientRects().length);
  const problems = [];
  const boxes = texts.map((e) => ({ e, r: e.getBoundingClientRect(), v: seen(e) })).filter((b) => b.v.bottom - b.v.top > 1);
  for (const { e, r } of boxes) {
    if (r.right > width + 0.5 || r.left < -0.5) problems.push(`past the edge: ${e.textContent.slice(0, 40)}`);
    if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).display !== 'inline')
      problems.push(`cut: ${e.textContent.slice(0, 40)}`);
  }
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.e.contains(b.e) || b.e.contains(a.e)) continue;
    const x = Math.min(a.v.right, b.v.right) - Math.max(a.v.left, b.v.left);
    const y = Math.min(a.v.bottom, b.v.bottom) - Math.max(a.v.top, b.v.top);
    if (x > 1 && y > 1) problems.push(`overlap: ${a.e.textContent.slice(0, 30)} / ${b.e.textContent.slice(0, 30)}`);
  }
  if (document.documentElement.scrollWidth > width) problems.push('the page scrolls sideways');
  return problems;
}"""


def overlaps_and_cuts(page) -> list[str]:
    """The check with the run scrolled to its start, and to its end (where the page follows it)."""
    found = []
    for where in ("0", "stage.scrollHeight"):
        page.evaluate(f"() => {{ const stage = document.getElementById('stage'); stage.scrollTop = {where}; }}")
        found += page.evaluate(LAYOUT_CHECK)
    return found


def test_a_student_cannot_step_and_nothing_runs(embedded, pages):
    with Served("skip-locked", dsn=dsn_of(embedded)) as served:
        student = pages(served.students)
        teacher = pages(served.teacher)
        at_step(teacher, -1)
        # One character off; never the token itself, whatever its last character is.
        wrong = served.token[:-1] + ("y" if served.token.endswith("x") else "x")
        for path in ("/api/step", "/api/step?teacher=", "/api/step?teacher=" + wrong):
            status, body = served.post(path)
            assert status == 403, (path, status, body)
        # From the student's page itself, as a curious student would try it.
        status = student.evaluate("async () => (await fetch('/api/step', {method: 'POST'})).status")
        assert status == 403
        assert student.evaluate("() => document.body.dataset.at") == "-1"
        assert json.loads(served.get("/api/state")[2])["state"]["at"] == -1
        status, body = served.post(f"/api/step?teacher={served.token}")
        assert status == 200 and json.loads(body)["at"] == 0
        at_step(student, 0)
        served.press("\n")  # the terminal's Enter steps too
        at_step(student, 1)
        served.press("q")
        assert served.finish() == 0
    assert "quit before step 3" in served.err


def test_ctrl_c_ends_the_lesson_on_every_page_and_leaves_nothing(embedded, pages):
    before = scratch_databases(embedded)
    with Served("deadlock", dsn=dsn_of(embedded)) as served:
        teacher = pages(served.teacher)
        student = pages(served.students)
        step_through(teacher, [student], 7)
        student.wait_for_selector("#columns .waiting")
        time.sleep(1.5)
        # A page that joins long after the wait began counts its time from when it began.
        late = pages(served.students)
        so_far = late.inner_text("#columns .waiting .sofar")
        assert so_far.endswith(" s") and float(so_far.split()[-2]) >= 1.5, so_far
        served.interrupt()
        for page in (teacher, student):
            page.wait_for_selector("body[data-ended=true]")
            assert "interrupted (Ctrl-C) before step 8" in page.inner_text("#end")
        assert served.finish() == 130
    assert left_behind(embedded, before) == set()
    assert "Traceback" not in served.err


def test_back_and_forward_look_at_steps_already_run(embedded, pages):
    with Served("skip-locked", "--show-locks", dsn=dsn_of(embedded)) as served:
        teacher = pages(served.teacher)
        student = pages(served.students)
        step_through(teacher, [student], 3)
        teacher.keyboard.press("Space")  # the teacher's keys step as the button does
        at_step(student, 3)
        assert "-- A returned 1 row, locked" in column_text(student)  # --show-locks: locked vs returned
        student.keyboard.press("ArrowLeft")
        student.keyboard.press("ArrowLeft")
        assert student.evaluate("() => document.body.dataset.view") == "1"
        assert "B> BEGIN" not in column_text(student) and "Looking back at step 2" in student.inner_text("#next")
        student.click("#forward")
        assert student.evaluate("() => document.body.dataset.view") == "2"
        student.click("#latest")
        assert student.evaluate("() => document.body.dataset.view") == "3" and "B> BEGIN" in column_text(student)
        assert teacher.evaluate("() => document.body.dataset.at") == "3"  # looking back ran nothing
        served.press("q")
        served.finish()


def test_predict_asks_the_class_and_shows_the_tally(embedded, pages):
    with Served("deadlock", "--predict", dsn=dsn_of(embedded)) as served:
        teacher = pages(served.teacher)
        students = [pages(served.students), pages(served.students)]
        step_through(teacher, students, 1)  # the narration: nothing to predict
        for page in students:
            page.wait_for_selector("#predict button[data-choice=answers]")
        students[0].click("#predict button[data-choice=answers]")
        students[1].click("#predict button[data-choice=fails]")
        teacher.wait_for_function("() => document.querySelector('#predict .count').textContent.startsWith('2 votes')")
        small = pages(served.students, 800, 600)
        assert overlaps_and_cuts(small) == []  # the question, its buttons and the columns on a projector
        teacher.click("#step")  # reveals
        for page in students:
            page.wait_for_selector("#predict .tally")
            assert "returns (rows or OK): 1" in page.inner_text("#predict") and "fails: 1" in page.inner_text("#predict")
        teacher.click("#step")  # runs it
        for page in students:
            at_step(page, 1)
            page.wait_for_selector("#predict .outcome")
            assert "It returned." in page.inner_text("#predict")
        served.press("q")
        served.finish()


HOSTILE = r"""title: "<script>window.pwned = 1</script> \"quoted\" 'single' & <b>bold</b>"
summary: "<img src=x onerror=\"window.pwned=2\">"
sessions: [A, B]
setup: |
  CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(100));
  INSERT INTO t VALUES (1, '<script>window.pwned=3</script>');
steps:
  - narrate: "Look: </p><script>window.pwned=4</script> `</code><b>x</b>` and \u202e reversed"
  - A: SELECT v, '<img src=x onerror=window.pwned=5>' AS "<b>col</b>" FROM t;
    comment: "</span><script>window.pwned=6</script> \"q\""
  - B: SELECT CONCAT('bell', CHAR(7), CHAR(27), '[31mred') AS ctl, '</script><script>window.pwned=7</script>' AS s;
"""


def test_a_hostile_lesson_is_shown_as_text_and_runs_nothing_in_the_page(embedded, pages, tmp_path):
    lesson = tmp_path / "hostile.yaml"
    lesson.write_text(HOSTILE)
    with Served(str(lesson), dsn=dsn_of(embedded)) as served:
        teacher = pages(served.teacher)
        student = pages(served.students)
        step_through(teacher, [student])
        student.wait_for_selector("body[data-phase=over]")
        for page in (teacher, student):
            assert page.evaluate("() => window.pwned") is None
            assert page.inner_text("h1") == "<script>window.pwned = 1</script> \"quoted\" 'single' & <b>bold</b>"
            assert page.inner_text("#summary") == '<img src=x onerror="window.pwned=2">'
            text = column_text(page)
            assert "</p><script>window.pwned=4</script>" in text and "</code><b>x</b>" in text
            assert "<img src=x onerror=window.pwned=5>" in text and "</span><script>window.pwned=6</script>" in text
            assert "bell\\x07\\x1B[31mred" in text  # a control character written out, as the transcript does
            assert page.locator("script").count() == 1 and page.locator("#columns img, #columns b").count() == 0
        for path in ("/", "/static/lesson.js", "/static/lesson.css", "/api/state"):
            status, headers, _ = served.get(path)
            csp = headers["content-security-policy"]
            assert status == 200 and "script-src 'self'" in csp and "unsafe" not in csp and "default-src 'none'" in csp
        status, headers, whole = served.get("/lesson.html")
        assert status == 200 and "<script" not in whole and "&lt;script&gt;window.pwned=4" in whole
        assert "script-src" not in headers["content-security-policy"]  # so no script at all
        assert served.finish() == 0, served.err


def test_no_route_serves_a_file_by_its_name(embedded):
    with Served("skip-locked", dsn=dsn_of(embedded)) as served:
        for path in ("/static/../web.py", "/static/web.py", "/static/index.html", "/static/%2e%2e/state.py",
                     "/api/cycle/0.svg", "/api/cycle/-1.svg", "/lesson.html", "/pyproject.toml", "/etc/passwd"):
            status, _, body = served.get(path)
            assert status == 404, (path, status, body[:200])
        # On the loopback, a request naming another host is a web site that pointed its name
        # at 127.0.0.1 (DNS rebinding): refused, the token or not.
        request = urllib.request.Request(served.teacher, headers={"Host": "lesson.attacker.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 400
        served.press("q")
        served.finish()


def test_a_classroom_network_address_is_printed_and_answers(embedded):
    with Served("skip-locked", "--host", "0.0.0.0", dsn=dsn_of(embedded)) as served:
        host = served.students.split("//", 1)[1].split(":", 1)[0]
        assert host != "0.0.0.0" and served.teacher.startswith(served.students + "?teacher=")
        port = served.students.rsplit(":", 1)[1].strip("/")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/state", headers={"Host": f"{host}:{port}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.loads(answer.read())["teacher"] is False
        served.press("q")
        assert served.finish() == 0


BIG = """title: big results
sessions: [A, B]
setup: |
  CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200));
  INSERT INTO t SELECT seq, REPEAT('x', 200) FROM seq_1_to_3000;
steps:
  - A: SELECT * FROM t;
  - B: SELECT * FROM t WHERE id > 10;
  - A: SELECT * FROM t WHERE id > 20;
  - B: SELECT * FROM t WHERE id > 30;
"""


def test_a_page_that_reads_nothing_or_vanishes_never_holds_up_the_run(embedded, tmp_path):
    """Each state here is megabytes; a page that never reads fills its socket at once and a
    stream that waited for it would hold every step after."""
    import socket
    from urllib.parse import urlsplit

    lesson = tmp_path / "big.yaml"
    lesson.write_text(BIG)
    with Served(str(lesson), dsn=dsn_of(embedded)) as served:
        where = urlsplit(served.students)
        stuck, gone = [], []
        for _ in range(3):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((where.hostname, where.port))
            sock.sendall(f"GET /api/events HTTP/1.1\r\nHost: {where.hostname}\r\n\r\n".encode())
            stuck.append(sock)
        for _ in range(3):
            sock = socket.create_connection((where.hostname, where.port))
            sock.sendall(f"GET /api/events HTTP/1.1\r\nHost: {where.hostname}\r\n\r\n".encode())
            sock.recv(100)
            gone.append(sock)
        steps = 0
        while True:
            if steps == 1:
                for sock in gone:
                    sock.close()
            status, body = served.post(f"/api/step?teacher={served.token}")
            assert status == 200, body
            steps += 1
            if json.loads(body)["phase"] == "over":
                break
        assert steps == 4
        assert served.finish() == 0, served.err
        for sock in stuck:
            sock.close()


def test_a_taken_port_is_one_line_and_leaves_nothing(embedded):
    import socket

    from conftest import cli

    before = scratch_databases(embedded)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "skip-locked", "--port", str(port), "--dsn", dsn_of(embedded))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"jobqueue-demo: cannot listen on 127.0.0.1:{port}: Address already in use; --port 0 takes any free port"
    assert left_behind(embedded, before) == set()
