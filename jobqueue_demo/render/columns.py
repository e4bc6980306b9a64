"""The classic concurrency diagram: one column per session, time downwards, one row per event.

A statement held on a lock keeps a marker in its column on every line until the row where it
completes, so the reader sees who is blocked while the others go on. Every line fits the
given width: SQL, results and prose wrap at spaces with continuation lines indented, and a
result table too wide for its column is shown expanded, one `column | value` line each, as
psql's \\x does. Narration spans the whole width, so it never reads as one session's output.
Below MIN_CELL cells per column a statement keyword no longer fits beside its prompt, and
the view falls back to the transcript, saying why in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..run import events as ev
from ..scenario.fault_kinds import BY_NAME
from .color import console, session_colours
from .table import format_table
from .transcript import (
    NARRATION,
    NOTE,
    RESULT,
    SQL,
    Line,
    deadlock_lines,
    error_notes,
    event_lines,
    fault_text,
    is_error,
    locks_taken_text,
    notice_lines,
    one_result,
    statement_lines,
    wait_phrase,
)
from .wrap import cells, expanded, fold, reflow, wrap

if TYPE_CHECKING:
    from ..engine.types import Result

WAIT, ERROR, MARK, HEAD, FRAME, TABLE = "wait", "error", "mark", "head", "frame", "table"
# The narrowest column that holds a prompt and a statement keyword ("relay> SELECT id,").
MIN_CELL = 20


@dataclass(frozen=True)
class Glyphs:
    sep: str
    cross: str
    rule: str
    mark: str


PLAIN = Glyphs(" | ", "-+-", "-", ":")
BOX = Glyphs(" │ ", "─┼─", "─", "┊")


@dataclass(frozen=True)
class Segment:
    """A run of text in one style: `kind` says what it is, `session` whose colour it takes."""

    text: str
    kind: str = FRAME
    session: str | None = None


@dataclass(frozen=True)
class Block:
    """Lines that fill the columns first..last (inclusive) of one row."""

    first: int
    last: int
    lines: tuple[Line, ...]


class ColumnsLayout:
    """Turns events into lines of segments, remembering which sessions are still waiting."""

    def __init__(self, sessions: tuple[str, ...], width: int, glyphs: Glyphs):
        self.sessions = sessions
        self.glyphs = glyphs
        self.cell = cell_width(len(sessions), width, glyphs)
        self.waiting: set[str] = set()

    def header(self) -> list[tuple[Segment, ...]]:
        names = self._join([Segment(_clip(n, self.cell), HEAD, n) for n in self.sessions], self.glyphs.sep)
        return [names, self._rule()]

    def lines(self, event) -> list[tuple[Segment, ...]]:
        if isinstance(event, ev.RunStarted):
            return self.header()
        if isinstance(event, ev.RunFinished):
            return [self._rule()]
        block = self._block(event)
        out = self._render(block) if block is not None else []
        self._track(event)
        return out

    # -- what goes where --------------------------------------------------------

    def _block(self, event) -> Block | None:
        if isinstance(event, ev.Completed):
            return self._own(event.session, completed_lines(event, self.cell))
        if isinstance(event, ev.Waiting):
            wait = Line(f"-- {wait_phrase(event)}", event.session, WAIT)
            return self._own(event.session, [*commented_statement(event.session, event.sql, event.comment), wait])
        if isinstance(event, ev.FaultApplied):
            return self._own(event.session, [Line(fault_text(event), event.session, NOTE)])
        if isinstance(event, ev.LocksTaken):
            return self._own(event.session, [Line(locks_taken_text(event), event.session, NOTE)])
        if isinstance(event, (ev.Narrated, ev.Stuck)):
            return self._spanning(event_lines(event))
        if isinstance(event, ev.LocksShown):
            span = self._spanning([])
            numeric = (False,) * len(event.columns)
            table = rows_lines(None, event.columns, numeric, event.rows, self._width(span))
            return replace(span, lines=(Line(f"-- locks: {event.note}", None, NOTE), *table))
        return None

    def _own(self, session: str, lines: list[Line]) -> Block:
        column = self.sessions.index(session)
        return Block(column, column, tuple(lines))

    def _spanning(self, lines: list[Line]) -> Block:
        """A row across every column: in one session's column it would read as its output."""
        return Block(0, len(self.sessions) - 1, tuple(lines))

    def _track(self, event) -> None:
        if isinstance(event, ev.Waiting):
            self.waiting.add(event.session)
        # A dropped socket ends a waiting statement without an answer, so no Completed follows.
        if isinstance(event, ev.Completed) or isinstance(event, ev.FaultApplied) and BY_NAME[event.action].drops_socket:
            self.waiting.discard(event.session)

    # -- drawing ----------------------------------------------------------------

    def _render(self, block: Block) -> list[tuple[Segment, ...]]:
        fitted = self._fit(block)
        out = []
        for row in range(max(1, len(fitted))):
            before = [self._filler(name, row) for name in self.sessions[: block.first]]
            after = [self._filler(name, row) for name in self.sessions[block.last + 1:]]
            out.append(self._join([*before, fitted[row], *after], self.glyphs.sep))
        return out

    def _width(self, block: Block) -> int:
        count = block.last - block.first + 1
        return self.cell * count + len(self.glyphs.sep) * (count - 1)

    def _fit(self, block: Block) -> list[Segment]:
        width = self._width(block)
        out = []
        for line in block.lines:
            kind = ERROR if is_error(line) else line.kind
            for piece in wrap_line(line, width):
                out.append(Segment(pad(piece, width), kind, line.session))
        return out or [Segment(" " * width)]

    def _filler(self, session: str, row: int) -> Segment:
        if session not in self.waiting:
            return Segment(" " * self.cell)
        text = f"{self.glyphs.mark} waiting" if row == 0 else self.glyphs.mark
        return Segment(_clip(text, self.cell), MARK, session)

    def _rule(self) -> tuple[Segment, ...]:
        return self._join([Segment(self.glyphs.rule * self.cell) for _ in self.sessions], self.glyphs.cross)

    def _join(self, parts: list[Segment], sep: str) -> tuple[Segment, ...]:
        out: list[Segment] = []
        for i, part in enumerate(parts):
            if i:
                out.append(Segment(sep))
            out.append(part)
        return tuple(out)


def completed_lines(event: ev.Completed, width: int) -> list[Line]:
    if event.waited_ms is not None:
        head = [Line(f"{event.session}> <... completed after {event.waited_ms:.0f} ms>", event.session, SQL)]
    else:
        head = commented_statement(event.session, event.sql, event.comment)
    result = event.result
    for each in (*result.earlier, result):
        head += notice_lines(event.session, each)
        if each.is_rows and each.error is None:
            head += rows_lines(event.session, each.columns, each.numeric, each.rows, width, each)
        else:
            head += one_result(event.session, event.sql, each)
    return head + error_notes(event.session, result, event.rollback) + deadlock_lines(event)


def cell_width(sessions: int, width: int, glyphs: Glyphs) -> int:
    """Cells per column; however narrow the terminal, nothing may run past its edge."""
    return max(2, (width - len(glyphs.sep) * (sessions - 1)) // sessions)


def rows_lines(session: str | None, columns, numeric, rows, width: int, result: Result | None = None) -> list[Line]:
    """psql's aligned table where it fits the column, else its expanded form (\\x); `result`
    (a statement's) says what of it was not kept."""
    cuts = (result.omitted, result.cut, result.capped) if result else ()
    table = format_table(columns, numeric, rows, *cuts).split("\n")
    if max(cells(line) for line in table) > width:
        # \\x has no footer, but what was not kept must still be said.
        table = expanded(columns, rows, width) + ([table[-1]] if result and not result.whole else [])
    return [Line(text, session, TABLE) for text in table]


def commented_statement(session: str, sql: str, comment: str | None) -> list[Line]:
    """The statement under its prompt; a comment gets a line of its own, as columns are narrow."""
    lines = statement_lines(session, sql)
    return lines + [Line(f"-- {comment}", session, NOTE)] if comment else lines


def wrap_line(line: Line, width: int) -> list[str]:
    """SQL keeps a hanging indent under its prompt; tables fold rather than break at spaces."""
    if not line.text:
        return [""]
    if line.kind == SQL:
        indent = " " * (len(line.session) + 2)
        text = line.text if line.text.startswith(f"{line.session}> ") else indent + line.text
        return wrap(text, width, indent)
    if line.kind == TABLE:
        return fold(line.text, width)
    if line.kind == NARRATION:
        return reflow(line.text, width)
    return wrap(line.text, width, "   " if line.kind in (NOTE, WAIT, RESULT) else "")


def pad(text: str, width: int) -> str:
    return text + " " * max(0, width - cells(text))


def _clip(text: str, width: int) -> str:
    return pad(fold(text, width)[0], width)


def plain_text(line: tuple[Segment, ...]) -> str:
    return "".join(s.text for s in line).rstrip()


# How each kind of segment looks when colour is on; {c} is its session's colour (color.py).
RICH_KIND = {SQL: "bold {c}", RESULT: "{c}", TABLE: "{c}", HEAD: "bold {c}", ERROR: "bold red", NOTE: "dim",
             NARRATION: "italic", WAIT: "yellow", MARK: "dim yellow", FRAME: "dim"}


class ColumnsView:
    """Writes the diagram as events arrive: rich styles when `color` (color.py decides), box
    drawing on a terminal (a pipe gets ASCII), plain text otherwise.

    Too narrow for its sessions, it writes the transcript instead, after a one-line note.
    """

    def __init__(self, stream, sessions: tuple[str, ...], width: int, color: bool):
        self.stream = stream
        self.layout = ColumnsLayout(sessions, width, BOX if stream.isatty() else PLAIN)
        self.console = console(stream, on=True, width=width, highlight=False, markup=False, emoji=False) if color else None
        self.colours = session_colours(sessions)
        self.fallback = None
        if self.layout.cell < MIN_CELL:
            from .transcript import TranscriptWriter

            self.fallback = TranscriptWriter(stream, sessions, color, width)
            need = MIN_CELL * len(sessions) + len(self.layout.glyphs.sep) * (len(sessions) - 1)
            self.note = Line(
                f"-- columns: {len(sessions)} sessions in {width} columns leave {self.layout.cell} characters each, "
                f"too narrow for a statement; showing the transcript (columns need {need})", None, NOTE,
            )

    def write(self, event) -> None:
        if self.fallback is not None:
            note = [self.note] if isinstance(event, ev.RunStarted) else []
            self.fallback.write(note + event_lines(event))
            return
        for line in self.layout.lines(event):
            if self.console is None:
                self.stream.write(plain_text(line) + "\n")
            else:
                self.console.print(self._styled(line), soft_wrap=True)
        self.stream.flush()

    def _styled(self, line: tuple[Segment, ...]):
        from rich.text import Text

        text = Text()
        for segment in line:
            colour = self.colours.get(segment.session, "default")
            text.append(segment.text, RICH_KIND.get(segment.kind, "").format(c=colour))
        text.rstrip()
        return text
