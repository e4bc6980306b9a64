"""The columns view for a projector: golden output at 60, 80 and 120 columns, 2 and 4 sessions.

The events come from a real run; only the timings (which vary run to run) are set to fixed
values before rendering. JOBQUEUE_DEMO_UPDATE_GOLDEN=1 rewrites the files after a change
that is meant; read the diff before committing it.
"""

from __future__ import annotations

import io
import os
from itertools import takewhile
from pathlib import Path

import pytest

from conftest import steady

from jobqueue_demo import api as core
from jobqueue_demo.run import events as ev
from jobqueue_demo.render.columns import MIN_CELL, ColumnsView, cells

GOLDEN = Path(__file__).parent / "golden"
LESSONS = {"for-update-waits": 2, "outbox": 4}
WIDTHS = (60, 80, 120)


@pytest.fixture(scope="module")
def lesson_events(embedded):
    return {name: [steady(e) for e in core.run(core.load(name), embedded, 10.0).events] for name in LESSONS}


def drawn(events, sessions, width: int) -> str:
    out = io.StringIO()
    view = ColumnsView(out, sessions, width, color=False)
    for event in events:
        view.write(event)
    return out.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_columns_match_the_golden_drawing(lesson_events, lesson, width):
    sessions = core.load(lesson).session_names
    assert len(sessions) == LESSONS[lesson]
    text = drawn(lesson_events[lesson], sessions, width)
    golden = GOLDEN / f"columns-{lesson}-{width}.txt"
    if os.environ.get("JOBQUEUE_DEMO_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_columns_break_only_at_spaces_and_keep_narration_whole(lesson_events, lesson, width):
    sessions = core.load(lesson).session_names
    lines = drawn(lesson_events[lesson], sessions, width).splitlines()
    if (width - 3 * (len(sessions) - 1)) // len(sessions) < MIN_CELL:
        note = [lines[0], *takewhile(lambda line: line.startswith("   "), lines[1:])]
        assert note[0].startswith(f"-- columns: {len(sessions)} sessions in {width} columns leave")
        assert "showing the transcript" in " ".join(note) and " | " not in "\n".join(lines[len(note):len(note) + 3])
        # The transcript instead fits the width too, but for the server's result tables.
        assert max(cells(line) for line in lines if not is_table_row(line)) <= width
        return
    assert max(cells(line) for line in lines) <= width
    words = {w for e in lesson_events[lesson] for w in _words(e)} | {"RECORD"}
    pieces = {p for line in lines for cell in line.split(" | ") for p in cell.split()}
    # Every piece of every cell is a whole word of the run (or table and frame punctuation).
    cut = sorted(p for p in pieces if p not in words and any(c.isalpha() for c in p) and "[" not in p)
    assert cut == [], cut
    narration = [e.text for e in lesson_events[lesson] if isinstance(e, ev.Narrated)]
    for text in narration:
        first = " ".join(text.split()[:4])
        assert any(line.startswith(first) for line in lines), first


def _words(event) -> list[str]:
    from jobqueue_demo.render.transcript import event_lines

    return [w for line in event_lines(event) for w in line.text.split()]


def is_table_row(line: str) -> bool:
    """A line of psql's table form, which keeps the server's rows as they are at any width."""
    return " | " in line or "-+-" in line or line.startswith(("---", " ")) and line.rstrip().endswith(("|", "-"))
