"""The lesson page as JSON: the same facts as the HTML and Markdown pages, for other tools."""

from __future__ import annotations

import json

from .events_json import records
from .export import WHY_HEADING, LessonFacts, paragraphs, passages, run_commands


def render_json(facts: LessonFacts) -> str:
    s = facts.scenario
    page = {
        "title": s.title,
        "summary": s.summary,
        "verified": facts.verified_text,
        "introduction": paragraphs(s.description),
        "transcript": [_passage(p) for p in passages(facts.events) if p.deadlock is None],
        # With --engines: every engine's transcript, the first one also given above.
        "transcripts": [
            {"engine": run.scenario.engine, "verified": run.verified,
             "transcript": [_passage(p) for p in passages(run.events) if p.deadlock is None]}
            for run in facts.runs
        ],
        "why": {"heading": WHY_HEADING, "paragraphs": paragraphs(s.why)},
        "run": run_commands(facts.lesson, facts.scenario.engines),
        "events": [r for e in facts.events for r in records(e)],
        "source": s.source,
    }
    return json.dumps(page, indent=2, ensure_ascii=False) + "\n"


def _passage(passage) -> dict:
    if passage.narration is not None:
        return {"narration": " ".join(passage.narration.split())}
    return {
        "lines": [
            {"text": p.line.text, "session": p.line.session, "kind": p.line.kind, "waiting": p.waiting} for p in passage.lines
        ]
    }
