"""Writes what a run observed back into the scenario file as its expectations.

The file is edited in place, step by step, so the author's layout, comments and narration
stay as they were; only each statement's `expect:` and the top-level `verified:` change.
"""

from __future__ import annotations

import json
import re

from ..engine.types import Result
from ..scenario.model import Expectation, Scenario, Statement, error_spelling
from .verify import Outcome, met

PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_ ./@()+=-]*$")
YAML_WORDS = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"}


def scalar(value: str | None) -> str:
    if value is None:
        return "null"
    if PLAIN.match(value) and value == value.strip() and value.lower() not in YAML_WORDS:
        return value
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _flow(values) -> str:
    return "[" + ", ".join(scalar(v) for v in values) + "]"


def expectation_text(
    outcome: Outcome, indent: int, assert_no_wait: bool = False, flow: bool = False, portable: bool = False,
) -> str:
    """The `expect:` entry for an outcome, its first line unindented, the rest at `indent`;
    on one line when `flow` (inside a `{...}` step, where block style is not allowed).
    `portable`: errors by their portable class wherever they have one (model.error_spelling).

    `waits: true` is always recorded; `waits: false` only where the author asked for it,
    since "did not wait" is the point of few statements.
    """
    pad = " " * (indent + 2)
    result: Result | None = outcome.result
    fields: list[str] = []
    if outcome.waited or assert_no_wait:
        fields.append(f"waits: {'true' if outcome.waited else 'false'}")
    if result is None:
        pass
    elif result.error is not None:
        fields.append(f"error: {error_spelling(result.error, portable)}")
    elif result.is_rows:
        fields.append(f"columns: {_flow(result.columns)}")
        # A result too long to keep whole is recorded by its columns only.
        if result.rows and result.whole:
            rows = [_flow(r) for r in result.rows]
            fields.append(f"rows: [{', '.join(rows)}]" if flow else "rows:\n" + "\n".join(f"{pad}  - {r}" for r in rows))
        elif result.whole:
            fields.append("rows: []")
    elif result.affected:
        fields.append(f"affected: {result.affected}")
    elif not fields:
        return "expect: ok"
    else:
        fields.append("ok: true")
    if flow or (all("\n" not in f for f in fields) and sum(map(len, fields)) < 50):
        return "expect: {" + ", ".join(fields) + "}"
    return "expect:\n" + "\n".join(pad + f for f in fields)


def _value(entry: str) -> str:
    """`{waits: true}` or `ok` from a one-line `expect: ...` entry."""
    return entry.removeprefix("expect: ")


def expectation_value(expect: Expectation) -> str:
    """An expectation as written by `record`, in flow style: another engine's, kept."""
    fields = []
    if expect.waits is not None:
        fields.append(f"waits: {'true' if expect.waits else 'false'}")
    if expect.error is not None:
        fields.append(f"error: {scalar(expect.error.spelling)}")
    if expect.columns is not None:
        fields.append(f"columns: {_flow(expect.columns)}")
    if expect.rows is not None:
        fields.append(f"rows: [{', '.join(_flow(r) for r in expect.rows)}]")
    if expect.affected is not None:
        fields.append(f"affected: {expect.affected}")
    if expect.ok and not fields:
        return "ok"
    if expect.ok:
        fields.append("ok: true")
    return "{" + ", ".join(fields) + "}"


def _column(text: str, offset: int) -> int:
    return offset - (text.rfind("\n", 0, offset) + 1)


def _trim_end(text: str, end: int) -> int:
    """YAML marks a block's end at the next token; the edit belongs at its last character."""
    while end > 0 and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def rewrite(scenario: Scenario, outcomes: dict[int, Outcome], verified: str) -> str:
    """The scenario's text with this engine's observations written in; the other engines'
    expectations and stamps kept."""
    text = scenario.source
    edits: list[tuple[int, int, str]] = []
    for index, step in scenario.statements():
        if index in outcomes:
            edit = _edit(text, step, outcomes[index], scenario)
            if edit is not None:
                edits.append(edit)
    edits.append(_verified_edit(text, scenario, verified))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _edit(text: str, step: Statement, outcome: Outcome, scenario: Scenario) -> tuple[int, int, str] | None:
    indent = _column(text, step.span.start)
    flow = text.startswith("{", step.span.start)
    several = len(scenario.engines) > 1
    assert_no_wait = step.expect is not None and step.expect.waits is False
    new = expectation_text(outcome, indent, assert_no_wait, flow, several)
    if several:
        if step.expect is not None and step.expect_shared and met(step.expect, outcome):
            return None  # it still holds here, and on the engines it was recorded on
        value = _value(expectation_text(outcome, indent, assert_no_wait, True, several))
        new = _by_engine(scenario, step, value, indent, flow)
    if step.expect_span is not None:
        return step.expect_span.start, _trim_end(text, step.expect_span.end), new
    if flow:
        closing = step.span.end - 1  # the step's `}`
        return closing, closing, ", " + new
    end = _trim_end(text, step.span.end)
    return end, end, "\n" + " " * indent + new


def _by_engine(scenario: Scenario, step: Statement, value: str, indent: int, flow: bool) -> str:
    """`expect:` with this engine's value and the others' kept: one value when every engine
    of the lesson expects the same, else a mapping by engine."""
    values = {engine: expectation_value(expect) for engine, expect in step.expect_others if expect is not None}
    values[scenario.engine] = value
    ordered = [(engine, values[engine]) for engine in scenario.engines if engine in values]
    if len(ordered) == len(scenario.engines) and len(set(values.values())) == 1:
        return f"expect: {value}"
    if flow:
        return "expect: {" + ", ".join(f"{engine}: {v}" for engine, v in ordered) + "}"
    pad = " " * (indent + 2)
    return "expect:\n" + "\n".join(f"{pad}{engine}: {v}" for engine, v in ordered)


def _verified_edit(text: str, scenario: Scenario, verified: str) -> tuple[int, int, str]:
    """The `verified:` entry with this engine's stamp; a lesson for MariaDB/MySQL alone
    keeps the single-text form."""
    stamps = dict(scenario.stamps) | {scenario.engine: verified}
    if scenario.engines == ("mysql",) and set(stamps) == {"mysql"}:
        entry = f"verified: {scalar(verified)}"
    else:
        entry = "verified:\n" + "\n".join(f"  {e}: {scalar(stamps[e])}" for e in scenario.engines if e in stamps)
    if scenario.verified_span is not None:
        return scenario.verified_span.start, _trim_end(text, scenario.verified_span.end), entry
    return _trim_end(text, len(text)), len(text), "\n" + entry + "\n"
