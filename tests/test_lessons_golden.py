"""Every shipped lesson's transcript, golden: a change to any view or lesson shows up as a diff.

Timings are fixed before drawing (they are the run's, not the lesson's); set
JOBQUEUE_DEMO_UPDATE_GOLDEN=1 to rewrite the files after an intended change.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from conftest import ROOT, steady
from jobqueue_demo import api as core
from jobqueue_demo.render.transcript import TranscriptWriter, event_lines, prompted

GOLDEN = Path(__file__).parent / "golden" / "lessons"
LESSONS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_transcript_is_golden(request, lesson):
    scenario = core.load(lesson)
    server = request.getfixturevalue("galera" if scenario.cluster else "embedded")
    out = io.StringIO()
    writer = TranscriptWriter(out, tuple(scenario.prompts.values()), color=False)
    core.run(scenario, server, 10.0, lambda event: writer.write(event_lines(steady(prompted(event, scenario.prompts)))))
    golden = GOLDEN / f"{lesson}.txt"
    if os.environ.get("JOBQUEUE_DEMO_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(out.getvalue())
    assert out.getvalue() == golden.read_text()
