"""What every page of a served lesson shows, built from the run's events: another view.

The run's thread adds events; the web server's thread reads one JSON text per version, made
once however many pages ask. The whole state goes to a page each time, so a page that falls
behind, joins late or reloads shows the current step by taking the latest one: nothing is
queued per page. Every text a lesson carries goes out as JSON data, never as markup; the
page sets it as text (serve/static/lesson.js).
"""

from __future__ import annotations

import json
import threading
import time

from ..render.deadlock_svg import cycle_picture
from ..render.export import SESSION_COLOURS
from ..render.stepper import step_text
from ..render.transcript import event_lines, is_error, prompted, wait_phrase
from ..run import events as ev
from ..scenario.model import Narration, Statement

# What a class may predict a statement does, as the page asks it (--predict).
ANSWERS, WAITS, FAILS = "answers", "waits", "fails"
PREDICTIONS = (ANSWERS, WAITS, FAILS)
# Votes kept per step: a page that votes in a loop cannot grow the state without bound.
MAX_VOTERS = 500

# Where the lesson is, as the page draws it.
BEFORE, READY, RUNNING, OVER, STOPPED = "before", "ready", "running", "over", "stopped"


def lesson_length(scenario) -> int:
    """The steps a run takes: an isolation spec's, every permutation's."""
    if scenario.spec is not None:
        return sum(len(schedule) for schedule in scenario.spec.schedules())
    return len(scenario.steps)


def _step_kind(step) -> str:
    if isinstance(step, Statement):
        return "statement"
    if isinstance(step, Narration):
        return "narration"
    return "action"


class LessonState:
    """The lesson so far: its steps, what each did, who waits, the votes; one version per change."""

    def __init__(self, scenario, server_label: str, predict: bool = False):
        self.scenario = scenario
        self.predict = predict
        self._names = {prompt: name for name, prompt in scenario.prompts.items()}
        self._lock = threading.Lock()
        self._clock0 = time.perf_counter()
        self.version = 0
        self._json = ""
        self._lesson = {
            "title": scenario.title,
            "summary": scenario.summary,
            "server": server_label,
            "sessions": [{"name": n, "label": scenario.prompts[n], "colour": SESSION_COLOURS[i % len(SESSION_COLOURS)]}
                         for i, n in enumerate(scenario.session_names)],
            "total": lesson_length(scenario),
            "predict": predict,
        }
        # The steps run, counted: an isolation spec runs its steps once per permutation, so the
        # count goes on where the scenario's step index starts again.
        self.at = -1
        self._index = -1  # the scenario's step running (or run last)
        self._held: int | None = None  # the scenario's step waiting for the teacher
        self.phase = BEFORE
        self._entries: list[dict] = []
        self._open_waits: dict[str, dict] = {}
        self._step_ms: list[float] = []  # when each step started, on the lesson's clock
        self._cycles: list[str] = []  # each deadlock's SVG, by number
        self._votes: dict[int, dict[str, str]] = {}  # by the count of the step asked about
        self._asked: dict[int, dict] = {}
        self._revealed: set[int] = set()
        self._outcomes: dict[int, str] = {}
        self.verdict: dict | None = None
        self.page_html: str | None = None
        self.message = ""
        self._render()

    def now_ms(self) -> float:
        return (time.perf_counter() - self._clock0) * 1000.0

    # -- the run's thread ------------------------------------------------------------------

    def add(self, event) -> None:
        with self._lock:
            self._add(event)
            self._render()

    def hold(self, index: int) -> None:
        """Step `index` of the scenario waits for the teacher."""
        with self._lock:
            self._held = index
            self.phase = READY
            self._render()

    def set_phase(self, phase: str, message: str = "") -> None:
        with self._lock:
            self.phase = phase
            self.message = message or self.message
            self._render()

    def finish(self, mismatches: list, checked: int, page_html: str | None) -> None:
        """The lesson ran to its end: the verdict, and the page of the whole run."""
        with self._lock:
            self.verdict = {"met": not mismatches, "checked": checked, "mismatches": [str(m) for m in mismatches]}
            self.page_html = page_html
            self.phase = OVER
            self.message = "the lesson is over: sessions closed, scratch database dropped"
            self._render()

    # -- the pages' requests -----------------------------------------------------------------

    def vote(self, voter: str, choice: str) -> bool:
        """A prediction for the step about to run; False when no step is asking for one."""
        with self._lock:
            step = self.asking()
            if step is None or choice not in PREDICTIONS:
                return False
            votes = self._votes.setdefault(step, {})
            self._asked[step] = self._step_json(self._held)
            if voter not in votes and len(votes) >= MAX_VOTERS:
                return False
            votes[voter] = choice
            self._render()
            return True

    def asking(self) -> int | None:
        """The count of the statement step whose outcome the class is predicting now, if any."""
        nxt = self.at + 1
        if not self.predict or self.phase != READY or self._held is None or nxt in self._revealed:
            return None
        return nxt if isinstance(self.scenario.steps[self._held], Statement) else None

    def reveal(self) -> bool:
        """Show the tally of the step being predicted; False when none is."""
        with self._lock:
            step = self.asking()
            if step is None:
                return False
            self._revealed.add(step)
            self._render()
            return True

    def cycle_svg(self, number: int) -> str | None:
        with self._lock:
            return self._cycles[number] if 0 <= number < len(self._cycles) else None

    def json(self) -> tuple[int, str]:
        """(version, the state as JSON) for a page."""
        with self._lock:
            return self.version, self._json

    # -- building ----------------------------------------------------------------------------

    def _add(self, event) -> None:
        if isinstance(event, ev.StepStarting):
            self.at += 1
            self._index = event.index
            self._held = None
            self._step_ms.append(self.now_ms())
            self.phase = RUNNING
            return
        if isinstance(event, (ev.RunStarted, ev.RunFinished)):
            return
        self._note_outcome(event)
        if isinstance(event, ev.Narrated):
            self._entries.append({"step": self.at, "type": "narration", "session": None, "text": event.text})
        elif isinstance(event, ev.Waiting):
            self._waiting(event)
        else:
            if isinstance(event, (ev.Completed, ev.FaultApplied)):
                self._end_wait(event)
            self._lines(event)
            if isinstance(event, ev.Completed) and event.deadlock is not None:
                self._cycle(event)

    def _note_outcome(self, event) -> None:
        """What the step's statement did first: what the class predicted."""
        if self.at in self._outcomes or not isinstance(event, (ev.Waiting, ev.Completed)) or event.index != self._index:
            return
        if isinstance(event, ev.Waiting):
            self._outcomes[self.at] = WAITS
        else:
            self._outcomes[self.at] = FAILS if event.result.error is not None else ANSWERS

    def _lines(self, event) -> None:
        lines = event_lines(prompted(event, self.scenario.prompts))
        if not lines:
            return
        session = getattr(event, "session", None)
        self._entries.append({
            "step": self.at, "type": "lines", "session": session if session in self._names.values() else None,
            "lines": [{"text": line.text, "kind": "error" if is_error(line) else line.kind} for line in lines],
        })

    def _waiting(self, event: ev.Waiting) -> None:
        told = prompted(event, self.scenario.prompts)
        entry = {
            "step": self.at, "type": "waiting", "session": event.session, "sql": f"{told.session}> {event.sql}",
            "comment": event.comment or "", "phrase": wait_phrase(told), "kind": event.kind, "lock": event.lock,
            "blockers": [self._names.get(b, b) for b in told.blockers], "since_ms": self.now_ms(),
            "until_step": None, "waited_ms": None,
        }
        self._open_waits[event.session] = entry
        self._entries.append(entry)

    def _end_wait(self, event) -> None:
        wait = self._open_waits.pop(event.session, None)
        if wait is not None:
            wait["until_step"] = self.at
            wait["waited_ms"] = self.now_ms() - wait["since_ms"]

    def _cycle(self, event: ev.Completed) -> None:
        colours = {n: SESSION_COLOURS[i % len(SESSION_COLOURS)] for i, n in enumerate(self.scenario.session_names)}
        svg, summary = cycle_picture(event.deadlock, colours)
        self._cycles.append(svg)
        self._entries.append({"step": self.at, "type": "cycle", "session": None, "number": len(self._cycles) - 1,
                              "summary": summary})

    def _step_json(self, index: int | None) -> dict | None:
        if index is None:
            return None
        step = self.scenario.steps[index]
        return {"text": step_text(step), "kind": _step_kind(step), "session": getattr(step, "session", None)}

    def _render(self) -> None:
        self.version += 1
        asking = self.asking()
        votes = {
            str(step): {
                "count": len(chosen),
                "step": self._asked.get(step),
                "tally": {p: sum(1 for c in chosen.values() if c == p) for p in PREDICTIONS} if step in self._revealed else None,
            }
            for step, chosen in self._votes.items()
        }
        self._json = json.dumps({
            "version": self.version,
            "lesson": self._lesson,
            "at": self.at,
            "next": self._step_json(self._held),
            "phase": self.phase,
            "message": self.message,
            "step_ms": self._step_ms,
            "entries": self._entries,
            "asking": asking,
            "votes": votes,
            "revealed": sorted(self._revealed),
            "outcomes": {str(k): v for k, v in self._outcomes.items()},
            "verdict": self.verdict,
            "page": self.page_html is not None,
        }, ensure_ascii=True)
