"""Writes what a run observed back into the scenario file as its expectations.

The file is edited in place, step by step, so the author's layout, comments and narration
stay as they were; only each statement's `expect:` and the top-level `verified:` change.
"""

from __future__ import annotations

import json
import re

from ..engine.result import Result
from ..scenario.model import Scenario, Statement
from .verify import Outcome

PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_ ./@()+=-]*$")
YAML_WORDS = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"}
PORTABLE_CLASSES = ("lock-not-available", "connection-lost")


def scalar(value: str | None) -> str:
    if value is None:
        return "null"
    if PLAIN.match(value) and value == value.strip() and value.lower() not in YAML_WORDS:
        return value
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _flow(values) -> str:
    return "[" + ", ".join(scalar(v) for v in values) + "]"


def _error_spelling(error) -> str:
    """Record the portable class where servers differ, so a recording verifies on both."""
    if error.error_class in PORTABLE_CLASSES:
        return error.error_class
    return error.name or str(error.code)


def expectation_text(outcome: Outcome, indent: int, assert_no_wait: bool = False, flow: bool = False) -> str:
    """The `expect:` entry for an outcome, its first line unindented, the rest at `indent`;
    on one line when `flow` (inside a `{...}` step, where block style is not allowed).

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
        fields.append(f"error: {_error_spelling(result.error)}")
    elif result.is_rows:
        fields.append(f"columns: {_flow(result.columns)}")
        # A result too long to keep whole is recorded by its columns only.
        if result.rows and not result.omitted:
            rows = [_flow(r) for r in result.rows]
            fields.append(f"rows: [{', '.join(rows)}]" if flow else "rows:\n" + "\n".join(f"{pad}  - {r}" for r in rows))
        elif not result.omitted:
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


def _column(text: str, offset: int) -> int:
    return offset - (text.rfind("\n", 0, offset) + 1)


def _trim_end(text: str, end: int) -> int:
    """YAML marks a block's end at the next token; the edit belongs at its last character."""
    while end > 0 and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def rewrite(scenario: Scenario, outcomes: dict[int, Outcome], verified: str) -> str:
    text = scenario.source
    edits: list[tuple[int, int, str]] = []
    for index, step in scenario.statements():
        if index in outcomes:
            edits.append(_edit(text, step, outcomes[index]))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return _set_verified(text, verified)


def _edit(text: str, step: Statement, outcome: Outcome) -> tuple[int, int, str]:
    indent = _column(text, step.span.start)
    flow = text.startswith("{", step.span.start)
    new = expectation_text(outcome, indent, step.expect is not None and step.expect.waits is False, flow)
    if step.expect_span is not None:
        return step.expect_span.start, _trim_end(text, step.expect_span.end), new
    if flow:
        closing = step.span.end - 1  # the step's `}`
        return closing, closing, ", " + new
    end = _trim_end(text, step.span.end)
    return end, end, "\n" + " " * indent + new


def _set_verified(text: str, verified: str) -> str:
    line = f"verified: {scalar(verified)}"
    pattern = re.compile(r"^verified:.*$", re.MULTILINE)
    if pattern.search(text):
        return pattern.sub(lambda _: line, text, count=1)
    return text.rstrip("\n") + "\n" + line + "\n"
