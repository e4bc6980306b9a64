"""The lesson's transcript form: `A> statement`, then its result as psql and mysql show them."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..engine.types import Plain, Result, shown
from ..run import events as ev
from ..scenario.fault_kinds import BY_NAME
from .color import console, session_colours
from .table import format_table

# The mysql client reports an affected-row count for every statement; lessons show it only
# where it says something, as the seed transcript does.
COUNTED = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|LOAD)\b", re.IGNORECASE)
ROLLBACKS = re.compile(r"^\s*(ROLLBACK|ABORT)\b", re.IGNORECASE)

SQL, RESULT, NOTE, NARRATION = "sql", "result", "note", "narration"


@dataclass(eq=False)
class Line:
    """One line of a transcript: its text, whose it is (None: the lesson's), and what kind."""

    text: str
    session: str | None = None
    kind: str = SQL
    comment_at: int | None = None  # where a statement's ` -- comment` starts in `text`
    # Our own table's (columns, rows) on each of its lines: a terminal gets it refitted.
    table: tuple | None = None


def prompted(event, prompts: dict[str, str]):
    """The event with every session it names (its own, blockers, a deadlock's parties, a
    stuck chain, a lock table's rows) named as the prompt shows them, e.g. `A@1`."""
    if all(name == prompt for name, prompt in prompts.items()):
        return event
    if isinstance(event, ev.Stuck):
        return replace(event, chain=event.chain.renamed(prompts))
    if isinstance(event, ev.LocksShown):
        return replace(event, rows=tuple((prompts.get(r[0], r[0]), *r[1:]) for r in event.rows))
    session = getattr(event, "session", None)
    if session not in prompts:
        return event
    changes = {"session": prompts[session]}
    if getattr(event, "blockers", None):
        changes["blockers"] = tuple(prompts.get(b, b) for b in event.blockers)
    if getattr(event, "edges", None):
        changes["edges"] = tuple(
            replace(e, session=prompts.get(e.session, e.session), waits_for=tuple(prompts.get(w, w) for w in e.waits_for))
            for e in event.edges
        )
    if getattr(event, "deadlock", None) is not None:
        changes["deadlock"] = event.deadlock.renamed(prompts)
    return event.replaced(**changes) if isinstance(event, Plain) else replace(event, **changes)


def statement_lines(session: str, sql: str, trailer: str | None = None) -> list[Line]:
    lines = sql.split("\n")
    lines[0] = f"{session}> {lines[0]}"
    out = [Line(t, session, SQL) for t in lines]
    if trailer:
        out[-1] = Line(f"{lines[-1]} -- {trailer}", session, SQL, comment_at=len(lines[-1]))
    return out


def result_lines(session: str, sql: str, result: Result, rollback: str | None = None) -> list[Line]:
    """Each statement's result, as psql shows a step of several; `rollback`: on a cluster node,
    what a 1213 was (run/events.py's Completed.rollback)."""
    lines = []
    for each in (*result.earlier, result):
        lines += notice_lines(session, each) + one_result(session, sql, each)
    return lines + error_notes(session, result, rollback)


def notice_lines(session: str, result: Result) -> list[Line]:
    """psql prints a notice as it arrives: above the result of the statement that raised it."""
    return [Line(text, session, RESULT) for text in result.notices]


def one_result(session: str, sql: str, result: Result) -> list[Line]:
    """One statement's error, table or OK line."""
    if result.error is not None:
        return [Line(str(result.error), session, RESULT)]
    if result.is_rows:
        table = format_table(result.columns, result.numeric, result.rows, result.omitted, result.cut, result.capped)
        return [Line(t, session, RESULT) for t in table.split("\n")]
    return [Line(query_ok(sql, result), session, RESULT)]


def query_ok(sql: str, result: Result) -> str:
    """The lesson's `Query OK` on every engine (the seed transcript's form), but PostgreSQL's
    `ROLLBACK`, as psql prints it, where a COMMIT of a failed transaction rolled back: Query OK
    would say it committed."""
    if result.tag == "ROLLBACK" and not ROLLBACKS.match(sql):
        return result.tag
    text = "Query OK"
    # A tag names its own statement, also one of several in a step (`UPDATE 1`).
    if COUNTED.match(result.tag or sql) and result.affected is not None:
        text += f", {result.affected} row{'' if result.affected == 1 else 's'} affected"
    if result.warnings and not result.notices:  # notices are shown themselves, above
        text += f", {result.warnings} warning{'' if result.warnings == 1 else 's'}"
    return text


# What a Galera node told a 1213 to be, when it was not a deadlock (engine/galera/node.py's causes).
ROLLBACK_NOTES = {
    "certification failure": "-- {s}'s write set failed certification against one committed first: its whole transaction was rolled back",
    "brute-force abort": (
        "-- {s}'s transaction was aborted by a conflicting write set replicated from another node "
        "(Galera brute-force abort): its whole transaction was rolled back"
    ),
}


def error_notes(session: str, result: Result, rollback: str | None) -> list[Line]:
    if result.error is None:
        return []
    if rollback in ROLLBACK_NOTES:
        text = ROLLBACK_NOTES[rollback].format(s=session)
    elif result.error.error_class == "deadlock":
        text = f"-- {session} was chosen as the deadlock victim: its whole transaction was rolled back"
    elif result.error.statement_only:
        text = f"-- only this statement was rolled back; {session}'s transaction is still open"
    elif result.error.error_class == "connection-lost":
        text = f"-- {session}'s connection is gone; the server rolls back its open transaction"
    else:
        return []
    return [Line(text, session, NOTE)]


def is_error(line: Line) -> bool:
    """A server's error line, in MySQL's form (`ERROR 1213 (40001): …`) or psql's (`ERROR:  …`)."""
    return line.kind == RESULT and line.text.startswith(("ERROR ", "ERROR:"))


def _comment(comment: str | None, extra: str | None) -> str | None:
    parts = [p for p in (comment, extra) if p]
    return " · ".join(parts) or None


def wait_phrase(event: ev.Waiting) -> str:
    """E.g. "waiting for a table lock held by B (jobs: B holds RowShareLock, A asks
    AccessExclusiveLock)", or for a statement behind another's request still in the queue,
    "waiting for a metadata lock, queued behind A's LOCK TABLES, which waits for B (...)"."""
    if event.kind == ev.ANNOTATED:
        return "told waiting by the permutation's annotation"
    holders = [e for e in event.edges if e.how != ev.QUEUED]
    queued = [e for e in event.edges if e.how == ev.QUEUED]
    article = "an" if event.kind[:1] in "aeiou" else "a"
    text = f"waiting for {article} {event.kind}"
    if holders or not queued:
        who = " and ".join(e.session for e in holders) or "another session"
        # "an insert intention lock held by A" would be false: A holds a lock on the gap.
        text += f", blocked by {who}'s lock on the gap" if event.kind in ev.ASKED_ONLY else f" held by {who}"
    if queued:
        text += ", queued behind " + " and ".join(_queued_request(e) for e in queued)
    modes = [f"{e.session} {'asks' if e.how == ev.QUEUED else 'holds'} {e.mode}" for e in event.edges if e.mode]
    if event.requested:
        modes.insert(0, f"{event.session} asks {event.requested}")
    details = ", ".join(modes)
    if event.lock and details:
        details = f"{event.lock}: {details}"
    return text + (f" ({details or event.lock})" if details or event.lock else "")


def _queued_request(edge: ev.Blocker) -> str:
    """"A's LOCK TABLES, which waits for B": the request ahead, and what keeps it waiting."""
    text = f"{edge.session}'s {edge.statement or 'request'}"
    return text + (f", which waits for {' and '.join(edge.waits_for)}" if edge.waits_for else "")


def event_lines(event) -> list[Line]:
    if isinstance(event, ev.Completed):
        if event.waited_ms is not None:
            head = [Line(f"{event.session}> <... completed after {event.waited_ms:.0f} ms>", event.session, SQL)]
        else:
            head = statement_lines(event.session, event.sql, event.comment)
        return head + result_lines(event.session, event.sql, event.result, event.rollback) + deadlock_lines(event)
    if isinstance(event, ev.Waiting):
        return statement_lines(event.session, event.sql, _comment(event.comment, wait_phrase(event)))
    if isinstance(event, ev.Narrated):
        return [Line(""), Line(event.text, None, NARRATION), Line("")]
    if isinstance(event, ev.FaultApplied):
        return [Line(fault_text(event), event.session, NOTE)]
    if isinstance(event, ev.LocksShown):
        table = format_table(event.columns, tuple(False for _ in event.columns), event.rows)
        whole = (event.columns, event.rows)
        return [Line(f"-- locks: {event.note}", None, NOTE)] + [Line(t, None, RESULT, table=whole) for t in table.split("\n")]
    if isinstance(event, ev.LocksTaken):
        return [Line(locks_taken_text(event), event.session, NOTE)]
    if isinstance(event, ev.Stuck):
        return stuck_lines(event)
    return spec_lines(event)


def spec_lines(event) -> list[Line]:
    """An isolation spec's own events: a permutation's start, notices, a failed teardown."""
    if isinstance(event, ev.PermutationStarting):
        return [Line(""), Line("-- permutation: " + " ".join(event.steps), None, NOTE)]
    if isinstance(event, ev.Noticed):
        return [Line(f"{event.session}: {shown(line)}", event.session, NOTE) for line in event.lines]
    if isinstance(event, ev.Notified):
        text = f'NOTIFY "{event.channel}" with payload "{event.payload}" from {event.sender}'
        return [Line(f"-- {event.session} received {shown(text)}", event.session, NOTE)]
    if isinstance(event, ev.StepCanceled):
        return [Line(f"-- {event.step} cancelled after {event.seconds} s (--step-timeout)", event.session, NOTE)]
    # A failed setup ends the run: the run's error line tells it.
    if isinstance(event, ev.ScriptAnswered) and event.what == "teardown" and event.result.error is not None:
        where = f"{event.session}'s {event.what}" if event.session else event.what
        return [Line(f"-- {where} failed: {event.result.error}", event.session, NOTE)]
    return []


def _rows(count: int) -> str:
    return f"{count} row" + ("" if count == 1 else "s")


def locks_taken_text(event: ev.LocksTaken) -> str:
    if event.returned is None:
        did = "failed"
    else:
        did = ("returned " if event.read else "changed ") + _rows(event.returned)
    records = f"{event.locked} index record" + ("" if event.locked == 1 else "s")
    return f"-- {event.session} {did}, locked {records} (its transaction holds {event.held})"


def deadlock_lines(event: ev.Completed) -> list[Line]:
    """The cycle the victim's 1213 broke, as the server told it, under the victim's error."""
    if event.deadlock is None:
        return []
    return [Line(f"-- {text}", event.session, NOTE) for text in event.deadlock.lines()]


def stuck_lines(event: ev.Stuck) -> list[Line]:
    """The whole waits-for chain, one session a line, so the reason nothing moves is on the page."""
    head = Line(f"-- stuck: {event.what}; who waits for whom:", None, NOTE)
    return [head] + [Line(f"--   {text}", None, NOTE) for text in event.chain.lines()]


def fault_text(event: ev.FaultApplied) -> str:
    call = f" ({event.call})" if event.call else ""
    text = f"-- {event.session} {BY_NAME[event.action].told}{call}: {event.detail}"
    if event.took_ms is not None:
        text += f" after {event.took_ms:.1f} ms"
    return text


# How each kind of line looks when colour is on; {c} is its session's colour (color.py).
STYLES = {SQL: "bold {c}", RESULT: "{c}", NOTE: "dim", NARRATION: "italic"}
ERROR_STYLE = "bold red"


def fit(line: Line, width: int | None) -> list[str]:
    """One line's pieces within `width` (None: the line as it is): SQL hangs under its prompt,
    its comment beside it or below it, narration is reflowed, notes and errors hang by three
    spaces; a result table's rows stay as psql prints them."""
    from .wrap import reflow, wrap, wrap_lines

    if width is None:
        return [line.text]
    if line.kind == SQL and line.session is not None:
        return _fit_sql(line, width)
    if line.kind == NARRATION:
        return reflow(line.text, width)
    if line.kind == NOTE or is_error(line):
        return wrap_lines(line.text, width, "   ")
    return wrap(line.text, width) if line.kind != RESULT else [line.text]


def _fit_sql(line: Line, width: int) -> list[str]:
    from .wrap import cells, wrap

    indent = " " * (len(line.session) + 2)
    if cells(line.text) <= width:
        return [line.text]
    sql = line.text if line.comment_at is None else line.text[: line.comment_at]
    if cells(sql) <= width:
        pieces = [sql]  # only its comment goes below
    else:
        pieces = wrap(sql if sql.startswith(f"{line.session}> ") else indent + sql, width, indent)
    if line.comment_at is None:
        return pieces
    comment = line.text[line.comment_at:]
    if cells(pieces[-1] + comment) <= width:
        return pieces[:-1] + [pieces[-1] + comment]
    return pieces + wrap(indent + comment.lstrip(), width, indent + "   ")


def refitted(lines: list[Line], width: int | None) -> list[Line]:
    """`lines` with each of our own tables (a lock list) fitted to `width` as one: unlike a
    server's result, it may wrap its cells or split (render/wrap.py)."""
    from .wrap import fitted_table

    if width is None:
        return lines
    out: list[Line] = []
    for line in lines:
        if line.table is None:
            out.append(line)
        elif not out or out[-1].table is not line.table:
            columns, rows = line.table
            fitted = fitted_table(columns, (False,) * len(columns), rows, width)
            out += [Line(text, line.session, line.kind, table=line.table) for text in fitted.split("\n")]
    return out


class TranscriptWriter:
    """Writes lines to a stream, each session in its own colour when `color` (color.py decides),
    wrapped to `width` on a terminal (render/wrap.py)."""

    def __init__(self, stream, sessions: tuple[str, ...], color: bool, width: int | None = None):
        self.stream = stream
        self.width = width
        # rich only when colour is on: plain text needs none of it.
        self.console = console(stream, on=True, highlight=False, markup=False, emoji=False) if color else None
        self.colours = session_colours(sessions)

    def write(self, lines: list[Line]) -> None:
        for line in refitted(lines, self.width):
            style = self._style(line) if self.console is not None and line.text else ""
            for text in fit(line, self.width):
                if style and text:
                    self.console.print(text, style=style, soft_wrap=True)
                else:
                    self.stream.write(text + "\n")
        self.stream.flush()

    def _style(self, line: Line) -> str:
        colour = self.colours.get(line.session)
        if line.kind in (SQL, RESULT) and colour is None:
            return ""
        if is_error(line):
            return ERROR_STYLE
        return STYLES[line.kind].format(c=colour)
