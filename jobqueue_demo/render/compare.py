"""`compare`: one lesson's two transcripts side by side, the steps whose outcome differs marked.

Each row of the view is one step: what happened on the left engine during that step, and
what happened on the right, each wrapped to half the width (80 columns by default), so a
wait on one side faces the immediate answer on the other. A step whose statement's outcome
differs carries a mark in the margin and is listed, with both outcomes, under the columns.
"""

from __future__ import annotations

import json

from ..run import events as ev
from ..run.compare import EngineRun, StepDifference
from .columns import PLAIN, WAIT, commented_statement, completed_lines, pad, rows_lines, wrap_line
from .wrap import wrap
from .transcript import NOTE, Line, event_lines, wait_phrase

MARK = "*"
MARGIN = 2  # the mark and a space


def compare_text(left: EngineRun, right: EngineRun, found: list[StepDifference], width: int = 80) -> str:
    cell = (width - MARGIN - len(PLAIN.sep)) // 2
    rule = " " * MARGIN + PLAIN.rule * cell + PLAIN.cross + PLAIN.rule * cell
    out = [*wrap(f"-- {left.scenario.title}", width, "   "), _row(" ", [left.server], [right.server], cell), rule]
    marked = {(d.permutation, d.step) for d in found}
    groups_left, groups_right = _by_step(left.events, cell), _by_step(right.events, cell)
    for key in sorted(groups_left.keys() | groups_right.keys()):
        mark = MARK if (key[0], key[2] + 1) in marked else " "
        out.append(_row(mark, groups_left.get(key, []), groups_right.get(key, []), cell))
    out.append(rule)
    out += [piece for line in summary_lines(left, right, found) for piece in wrap(line, width, " " * 6)]
    return "\n".join(out) + "\n"


def summary_lines(left: EngineRun, right: EngineRun, found: list[StepDifference]) -> list[str]:
    if not found:
        out = [f"the outcome of every statement is the same on {left.server} and {right.server}"]
    else:
        out = [f"{MARK} {len(found)} statement(s) whose outcome differs:"]
        for d in found:
            out += [
                f"  step {d.step} (line {d.line}), {d.session}: {d.what}",
                f"    {left.server}: {d.left}",
                f"    {right.server}: {d.right}",
            ]
    for run in (left, right):
        if run.mismatches:
            out.append(f"{len(run.mismatches)} expectation(s) not met on {run.server}:")
            out += ["  " + str(m).replace("\n", "\n  ") for m in run.mismatches]
    return out


def compare_json(left: EngineRun, right: EngineRun, found: list[StepDifference]) -> str:
    data = {
        "lesson": left.scenario.name,
        "title": left.scenario.title,
        "engines": [
            {"engine": run.scenario.engine, "server": run.server, "expectations_met": not run.mismatches}
            for run in (left, right)
        ],
        "differences": [
            # Two servers of one engine (MariaDB and MySQL) can be compared too: the outcomes
            # are in the order of "engines", not keyed by engine.
            {"step": d.step, "line": d.line, "session": d.session, "what": d.what, "outcomes": [d.left, d.right]}
            for d in found
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _by_step(events, cell: int) -> dict[tuple[int, int, int], list[str]]:
    """Each step's lines, wrapped to the cell: whatever happened while that step ran; keyed by
    (permutation, place in the run, step index): a spec's permutations counted from 1, each
    headed by its own line (step index -1), a scenario's steps all in permutation 0."""
    groups: dict[tuple[int, int, int], list[str]] = {}
    current = None
    permutation = 0
    for place, event in enumerate(events):
        if isinstance(event, ev.StepStarting):
            current = (permutation, place, event.index)
            continue
        if isinstance(event, ev.PermutationStarting):
            permutation += 1
            current = (permutation, place, -1)
        if current is None:
            continue
        for line in _lines(event, cell):
            groups.setdefault(current, []).extend(wrap_line(line, cell))
    return groups


def _lines(event, cell: int) -> list[Line]:
    if isinstance(event, ev.Completed):
        return completed_lines(event, cell)
    if isinstance(event, ev.Waiting):
        # Its comment too, as when it answers at once: a wait on one side only lost it.
        return commented_statement(event.session, event.sql, event.comment) + [Line(f"-- {wait_phrase(event)}", event.session, WAIT)]
    if isinstance(event, ev.Narrated):
        return [Line(f"-- {' '.join(event.text.split())}", None, NOTE)]
    if isinstance(event, ev.LocksShown):
        numeric = (False,) * len(event.columns)
        return [Line(f"-- locks: {event.note}", None, NOTE), *rows_lines(None, event.columns, numeric, event.rows, cell)]
    return [line for line in event_lines(event) if line.text]


def _row(mark: str, left: list[str], right: list[str], cell: int) -> str:
    rows = []
    for i in range(max(len(left), len(right), 1)):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        rows.append(f"{mark if i == 0 else ' '} {pad(a, cell)}{PLAIN.sep}{b}".rstrip())
    return "\n".join(rows)
