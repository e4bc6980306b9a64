"""Every shipped lesson's transcript, golden: a change to any view or lesson shows up as a diff.

Timings are fixed before drawing (they are the run's, not the lesson's); set
JOBQUEUE_DEMO_UPDATE_GOLDEN=1 to rewrite the files after an intended change.
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path

import pytest

from conftest import ROOT
from jobqueue_demo import api as core
from jobqueue_demo.render.transcript import TranscriptWriter, event_lines
from jobqueue_demo.run import events as ev

GOLDEN = Path(__file__).parent / "golden" / "lessons"
LESSONS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))


def steady(event):
    if isinstance(event, ev.Completed) and event.waited_ms is not None:
        return dataclasses.replace(event, waited_ms=12.0)
    if isinstance(event, ev.FaultApplied) and event.took_ms is not None:
        return dataclasses.replace(event, took_ms=0.5)
    return event


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_transcript_is_golden(embedded, lesson):
    scenario = core.load(lesson)
    out = io.StringIO()
    writer = TranscriptWriter(out, scenario.session_names, color=False)
    core.run(scenario, embedded, 10.0, lambda event: writer.write(event_lines(steady(event))))
    golden = GOLDEN / f"{lesson}.txt"
    if os.environ.get("JOBQUEUE_DEMO_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(out.getvalue())
    assert out.getvalue() == golden.read_text()
