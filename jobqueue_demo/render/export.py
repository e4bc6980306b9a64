"""Lesson pages from a verified run: one self-contained HTML file, or Markdown.

The page carries everything it shows: CSS inline, no scripts, fonts or images, so it reads
the same offline, from a mail attachment or from a static site.
"""

from __future__ import annotations

import html
import re
import shlex
from dataclasses import dataclass, replace

from ..engine.seam import DEFAULT_ENGINE
from ..engine.types import DeadlockCycle
from ..run import events as ev
from ..scenario.model import Scenario
from .deadlock_svg import cycle_svg
from .transcript import Line, event_lines, is_error, prompted

WHY_HEADING = "Why each piece matters"


@dataclass(frozen=True)
class LessonFacts:
    scenario: Scenario
    events: tuple
    verified: str  # "MariaDB 10.11.19 on 2026-12-02"
    lesson: str  # what to pass to `jobqueue-demo run`
    others: tuple[LessonFacts, ...] = ()  # the same lesson's runs on other engines, shown after this one
    # The file's stamps for the lesson's engines not run for this page ("PostgreSQL 15.20 on ...").
    recorded: tuple[str, ...] = ()

    @property
    def runs(self) -> tuple[LessonFacts, ...]:
        return (self, *self.others)

    @property
    def verified_text(self) -> str:
        """"Verified against MariaDB ... on ... · Verified against PostgreSQL ... on ..."."""
        return " · ".join(f"Verified against {stamp}" for stamp in (*(run.verified for run in self.runs), *self.recorded))


@dataclass(frozen=True)
class PageLine:
    line: Line
    waiting: bool


@dataclass(frozen=True)
class Passage:
    """A stretch of transcript, or (when `narration` is set) the prose between two."""

    lines: tuple[PageLine, ...] = ()
    narration: str | None = None
    deadlock: DeadlockCycle | None = None  # a figure of the cycle just told in the lines before


def passages(events, prompts: dict[str, str] | None = None) -> list[Passage]:
    """The page's passages; `prompts` names sessions as the transcript does (A@1 on a cluster),
    while each line keeps its session's own name for its colour."""
    names = {label: name for name, label in (prompts or {}).items()}
    out: list[Passage] = []
    pending: list[PageLine] = []
    for event in events:
        if isinstance(event, ev.Narrated):
            if pending:
                out.append(Passage(tuple(pending)))
                pending = []
            out.append(Passage(narration=event.text))
            continue
        waiting = isinstance(event, ev.Waiting)
        lines = event_lines(prompted(event, prompts) if prompts else event)
        pending += [PageLine(replace(line, session=names.get(line.session, line.session)), waiting) for line in lines]
        if isinstance(event, ev.Completed) and event.deadlock is not None:
            out += [Passage(tuple(pending)), Passage(deadlock=event.deadlock)]
            pending = []
    if pending:
        out.append(Passage(tuple(pending)))
    return out


def _heading(page: LessonFacts, run: LessonFacts) -> str:
    """"Transcript", or on a page with several engines "Transcript on PostgreSQL 15.20"."""
    return f"Transcript on {run.verified.rsplit(' on ', 1)[0]}" if page.others else "Transcript"


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, each folded to one line."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def run_commands(lesson: str, engines: tuple[str, ...] = (DEFAULT_ENGINE,)) -> list[str]:
    lesson = shlex.quote(lesson)
    out = [
        f"jobqueue-demo run {lesson}",
        f"jobqueue-demo run {lesson} --step --layout columns",
        f"jobqueue-demo verify {lesson}",
    ]
    out += [f"jobqueue-demo --engine {engine} run {lesson}" for engine in engines if engine != DEFAULT_ENGINE]
    if len(engines) > 1:
        out.append(f"jobqueue-demo compare {lesson}")
    return out


RUN_NOTE = (
    "With no --dsn it starts a private throwaway server; --dsn mysql://user@host:3306/db runs it on "
    "yours, in a scratch database that is dropped afterwards."
)


# -- Markdown ---------------------------------------------------------------------


def fence(text: str, info: str) -> str:
    """A fenced block that no run of backticks inside `text` can close early."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    marks = "`" * max(3, longest + 1)
    return f"{marks}{info}\n{text.rstrip(chr(10))}\n{marks}"


# Outside `code` spans a Markdown renderer takes these as HTML, links, images or emphasis.
MD_ACTIVE = re.compile(r"([\\*_\[\]<>&!#|~])")


def md_prose(text: str) -> str:
    """A scenario's prose as Markdown shows it: plain text, as the HTML page escapes it, and
    `code` spans kept. A lesson file is anyone's: raw, its <script> or [link](javascript:...)
    ran wherever the page was published."""
    pieces = re.split(r"(`[^`]+`)", text)
    return "".join(p if i % 2 else MD_ACTIVE.sub(r"\\\1", p) for i, p in enumerate(pieces))


def render_markdown(facts: LessonFacts) -> str:
    s = facts.scenario
    parts = [f"# {md_prose(s.title)}"]
    if s.summary:
        parts.append(f"*{md_prose(s.summary.strip())}*")
    parts.append(f"**{facts.verified_text}** · [Run it yourself](#run-it-yourself) · "
                 "[Scenario source](#scenario-source)")
    parts += [md_prose(p) for p in paragraphs(s.description)]
    for run in facts.runs:
        parts.append(f"## {_heading(facts, run)}")
        for passage in passages(run.events, facts.scenario.prompts):
            if passage.deadlock is not None:
                continue  # the transcript above it tells the cycle in text
            if passage.narration is not None:
                parts.append("> " + md_prose(" ".join(passage.narration.split())))
            else:
                parts.append(fence("\n".join(p.line.text for p in passage.lines), "text"))
    if s.why.strip():
        parts += [f"## {WHY_HEADING}", *[md_prose(p) for p in paragraphs(s.why)]]
    parts += ["## Run it yourself", fence("\n".join(run_commands(facts.lesson, facts.scenario.engines)), "sh"), RUN_NOTE]
    parts += ["## Scenario source", fence(s.source, "yaml")]
    parts.append(f"---\n\n{facts.verified_text}.")
    return "\n\n".join(parts) + "\n"


# -- HTML -------------------------------------------------------------------------

SESSION_COLOURS = ("#0e7490", "#a21caf", "#a16207", "#15803d", "#1d4ed8", "#b91c1c")

CSS = """
:root { --ink: #1f2328; --muted: #59636e; --paper: #ffffff; --code: #f6f8fa; --rule: #d1d9e0; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--paper); color: var(--ink);
  font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 52rem; margin: 0 auto; padding: 2.5rem 1.5rem 4rem; }
h1 { font-size: 2rem; line-height: 1.2; margin: 0 0 .4rem; }
h2 { font-size: 1.3rem; margin: 2.4rem 0 .8rem; padding-bottom: .3rem; border-bottom: 1px solid var(--rule); }
.kicker { text-transform: uppercase; letter-spacing: .08em; font-size: .75rem; color: var(--muted); margin: 0; }
.summary { font-size: 1.1rem; color: var(--muted); margin: 0 0 .8rem; }
.verified { display: inline-block; font-size: .9rem; padding: .25rem .7rem; border-radius: 999px;
  background: #dafbe1; color: #116329; border: 1px solid #aceebb; }
.verified a { color: inherit; }
pre { background: var(--code); border: 1px solid var(--rule); border-radius: 8px; padding: .8rem 1rem;
  overflow-x: auto; font: 13.5px/1.45 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
pre.transcript { padding: .6rem 0; }
/* Long lines wrap with a hanging indent under the `A> ` prompt instead of scrolling away. */
.l { display: block; padding: 0 1rem 0 calc(.8rem + 3ch); text-indent: -3ch; border-left: 4px solid transparent;
  white-space: pre-wrap; overflow-wrap: anywhere; }
.l.note { color: var(--muted); font-style: italic; }
.l.error { color: #cf222e; font-weight: 600; }
.l.wait { background: #fff8c5; }
.l.sql { font-weight: 700; }
.narration { margin: 1rem 0; padding: .6rem 1rem; border-left: 4px solid var(--rule);
  color: var(--muted); font-style: italic; }
.legend { font-size: .9rem; color: var(--muted); }
.chip { display: inline-block; padding: 0 .5rem; margin-right: .3rem; border-radius: 4px; color: #fff;
  font-weight: 700; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
figure.deadlock { margin: 1rem 0; padding: .5rem; border: 1px solid var(--rule); border-radius: 8px; }
figure.deadlock figcaption { font-size: .9rem; color: var(--muted); padding: 0 .5rem; }
footer { margin-top: 3rem; font-size: .85rem; color: var(--muted); }
"""


def _colours(sessions: tuple[str, ...]) -> dict[str, str]:
    return {name: SESSION_COLOURS[i % len(SESSION_COLOURS)] for i, name in enumerate(sessions)}


def _session_css(sessions: tuple[str, ...]) -> str:
    rules = []
    for i, _ in enumerate(sessions):
        colour = SESSION_COLOURS[i % len(SESSION_COLOURS)]
        rules.append(f".s{i} {{ border-left-color: {colour}; }} .s{i}.sql {{ color: {colour}; }} "
                     f".chip.s{i} {{ background: {colour}; }}")
    return "\n".join(rules)


def _inline(text: str) -> str:
    """Escaped prose, with `code` spans kept as code since lesson authors write SQL that way."""
    escaped = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _line_html(item: PageLine, classes: dict[str, str]) -> str:
    line = item.line
    kind = line.kind
    if is_error(line):
        kind = "error"
    names = ["l", kind]
    if line.session in classes:
        names.append(classes[line.session])
    if item.waiting:
        names.append("wait")
    return f'<span class="{" ".join(names)}">{html.escape(line.text) or " "}\n</span>'


def _transcript_html(facts: LessonFacts, classes: dict[str, str]) -> list[str]:
    chips = " ".join(f'<span class="chip {classes[n]}">{html.escape(n)}</span>' for n in facts.scenario.session_names)
    out = [f'<p class="legend">Sessions {chips}— each line is marked with the colour of the session it belongs to.</p>']
    for passage in passages(facts.events, facts.scenario.prompts):
        if passage.deadlock is not None:
            out.append(cycle_svg(passage.deadlock, _colours(facts.scenario.session_names)))
        elif passage.narration is not None:
            out.append(f'<p class="narration">{_inline(passage.narration)}</p>')
        else:
            body = "".join(_line_html(p, classes) for p in passage.lines)
            out.append(f'<pre class="transcript">{body}</pre>')
    return out


def render_html(facts: LessonFacts) -> str:
    s = facts.scenario
    classes = {name: f"s{i}" for i, name in enumerate(s.session_names)}
    verified = html.escape(facts.verified_text)
    body = ['<p class="kicker">jobqueue-demo lesson</p>', f"<h1>{html.escape(s.title)}</h1>"]
    if s.summary:
        body.append(f'<p class="summary">{_inline(s.summary.strip())}</p>')
    body.append(f'<p class="verified">{verified} · <a href="#run">Run it yourself</a> · '
                '<a href="#source">Scenario source</a></p>')
    body += [f"<p>{_inline(p)}</p>" for p in paragraphs(s.description)]
    for number, run in enumerate(facts.runs):
        anchor = "transcript" if number == 0 else f"transcript-{run.scenario.engine}"
        body += [f'<section id="{anchor}">', f"<h2>{html.escape(_heading(facts, run))}</h2>",
                 *_transcript_html(run, classes), "</section>"]
    if s.why.strip():
        body += ['<section id="why">', f"<h2>{WHY_HEADING}</h2>", *[f"<p>{_inline(p)}</p>" for p in paragraphs(s.why)],
                 "</section>"]
    commands = html.escape("\n".join(run_commands(facts.lesson, facts.scenario.engines)))
    body += ['<section id="run">', "<h2>Run it yourself</h2>", f"<pre><code>{commands}</code></pre>",
             f"<p>{_inline(RUN_NOTE)}</p>", "</section>"]
    body += ['<section id="source">', "<h2>Scenario source</h2>",
             f"<pre><code>{html.escape(s.source.rstrip())}</code></pre>", "</section>"]
    body.append(f"<footer>{verified} by running every step and checking it against the "
                "scenario's expectations.</footer>")
    head = (f'<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(s.title)}</title>\n<style>{CSS}{_session_css(s.session_names)}\n</style>")
    return (f'<!doctype html>\n<html lang="en">\n<head>\n{head}\n</head>\n<body>\n<main>\n'
            + "\n".join(body) + "\n</main>\n</body>\n</html>\n")
