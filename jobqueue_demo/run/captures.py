"""Values a session captured from its statements' answers, and the SQL that names them.

A statement with `capture: name` keeps the first column of its first row; a later statement
of the same session writes `:name` and is sent with the value as an SQL literal. The loader
has checked every reference; one whose statement failed, or whose value was cut (engine/caps.py:
the literal would not be the value), has no value and is sent as written, for the server to refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..engine.types import Result
from ..scenario.model import CAPTURE_REF, Statement


class Captures:
    def __init__(self, sessions: tuple[str, ...], literal: Callable[[str], str]):
        self.sessions = sessions
        self.literal = literal  # the engine's: MySQL's escapes a backslash, PostgreSQL's does not
        self.values: dict[str, dict[str, str | None]] = {name: {} for name in sessions}

    def forget(self) -> None:
        self.values = {name: {} for name in self.sessions}

    def keep(self, step: Statement, result: Result) -> None:
        if step.capture and result.rows and result.cut_short(result.rows[0][0]):
            self.values[step.session].pop(step.capture, None)
        elif step.capture and result.rows:
            self.values[step.session][step.capture] = result.rows[0][0]
        elif step.capture and result.error is None:
            self.values[step.session][step.capture] = None

    def substitute(self, step: Statement) -> str:
        """The statement's SQL with each captured `:name` written as a literal."""
        values = self.values[step.session]
        if not values:
            return step.sql

        def written(match: re.Match) -> str:
            name = match.group(1)
            if name not in values:
                return match.group(0)
            value = values[name]
            if value is None:
                return "NULL"
            if re.fullmatch(r"-?\d+(\.\d+)?", value):
                return value
            return self.literal(value)

        return CAPTURE_REF.sub(written, step.sql)
