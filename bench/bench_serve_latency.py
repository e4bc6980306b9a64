"""`serve`'s latency: from the teacher's step to every page showing it (goal: 100 ms or less).

The lesson is served on an embedded server with pages open in Debian's chromium (the
teacher's and --students more); the script steps it with POST /api/step and reads, on each
page, when it drew the step (performance.timeOrigin + now(), the same wall clock as this
process's). The anchor, in the same run and on the same server: the same lesson's steps in
`api.run` with no page at all, each step from its StepStarting to the next. The difference
is what the pages cost: the state's JSON, the event stream and the browser's drawing.

    .venv/bin/python bench/bench_serve_latency.py [--lesson deadlock] [--students 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conftest import dsn_of  # noqa: E402
from serving import Served, browser  # noqa: E402

from jobqueue_demo import api  # noqa: E402
from jobqueue_demo.engine.seam import open_server  # noqa: E402
from jobqueue_demo.run import events as ev  # noqa: E402


def plain_steps(lesson: str, server) -> list[float]:
    """Each step's time (ms) in a run with no page: StepStarting to the next one (or the end)."""
    marks: list[float] = []

    def mark(event) -> None:
        if isinstance(event, (ev.StepStarting, ev.RunFinished)):
            marks.append(time.perf_counter())

    api.run(api.load(lesson), server, 10.0, mark)
    return [(b - a) * 1000 for a, b in zip(marks, marks[1:])]


def served_steps(lesson: str, dsn: str, students: int) -> list[float]:
    """Each step's time (ms) from the teacher's request to the last page drawing it."""
    from playwright.sync_api import sync_playwright

    latencies = []
    with Served(lesson, dsn=dsn) as served, sync_playwright() as playwright:
        chrome = browser(playwright)
        # Each page in a context of its own, as each student has a browser of their own.
        pages = [chrome.new_context(viewport={"width": 1280, "height": 720}).new_page() for _ in range(students + 1)]
        for page, address in zip(pages, [served.teacher] + [served.students] * students):
            page.goto(address)
            page.wait_for_function("() => Number(document.body.dataset.version) > 0")
        while True:
            asked = time.time() * 1000
            status, body = served.post(f"/api/step?teacher={served.token}")
            if status != 200:
                raise SystemExit(f"step refused: {status} {body}")
            version = json.loads(body)["version"]
            drawn = [
                float(page.wait_for_function(
                    "([v]) => Number(document.body.dataset.version) >= v && document.body.dataset.renderedAt",
                    arg=[version]).json_value())
                for page in pages
            ]
            latencies.append(max(drawn) - asked)
            if json.loads(body)["phase"] == "over":
                break
        chrome.close()
        served.finish()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lesson", default="deadlock")
    parser.add_argument("--students", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with open_server(None) as server:
        plain, paged = [], []
        for _ in range(args.rounds):
            plain += plain_steps(args.lesson, server)
            paged += served_steps(args.lesson, dsn_of(server), args.students)
    anchor, latency = statistics.median(plain), statistics.median(paged)
    print(f"{args.lesson}: {len(paged)} steps served to {args.students + 1} pages, {len(plain)} run without pages")
    p90 = statistics.quantiles(paged, n=10)[-1]
    print(f"step -> every page: median {latency:.1f} ms, 90th percentile {p90:.1f} ms, max {max(paged):.1f} ms (goal: 100 ms)")
    print(f"the same steps without pages (anchor): median {anchor:.1f} ms, max {max(plain):.1f} ms")
    print(f"ratio served / anchor (medians): {latency / anchor:.1f}x; the pages add {latency - anchor:.1f} ms a step")


if __name__ == "__main__":
    main()
