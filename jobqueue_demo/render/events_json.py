"""The run as JSON Lines, for other tools: one object per line, written as things happen.

Every object has `event`; times are `time_ms`, milliseconds since the run started, and steps
are numbered from 1 as `verify` numbers them. A statement that waited on a lock gives a
`wait_start` when the wait is seen and a `wait_end` just before its `statement` result.
"""

from __future__ import annotations

import datetime
import json

from ..run import events as ev
from ..engine import mysql_errors
from ..engine.result import Result


def result_record(result: Result) -> dict:
    if result.error is not None:
        error = result.error
        return {"error": {"errno": error.errno, "sqlstate": error.sqlstate, "message": error.message,
                          "name": mysql_errors.name_of(error.errno)}}
    out: dict = {"affected": result.affected, "warnings": result.warnings}
    if result.is_rows:
        out = {"columns": list(result.columns), "rows": [list(r) for r in result.rows], **out}
        if result.omitted:
            out["rows_not_shown"] = result.omitted
    return {"result": out}


def records(event) -> list[dict]:
    """What one runner event says, as JSON-ready objects (none for the step markers)."""
    if isinstance(event, ev.RunStarted):
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        return [{"event": "run_started", "title": event.title, "server": event.server,
                 "database": event.database, "started_at": started}]
    if isinstance(event, ev.Waiting):
        return [{"event": "wait_start", "time_ms": _ms(event.at_ms), "step": event.index + 1,
                 "session": event.session, "statement": event.sql, "lock_kind": event.kind,
                 "lock": event.lock or None, "blockers": list(event.blockers)}]
    if isinstance(event, ev.Completed):
        return _completed(event)
    if isinstance(event, ev.Narrated):
        return [{"event": "narration", "step": event.index + 1, "text": event.text}]
    if isinstance(event, ev.FaultApplied):
        return [{"event": "fault", "time_ms": _ms(event.at_ms), "step": event.index + 1, "session": event.session,
                 "action": event.action, "detail": event.detail, "took_ms": _ms(event.took_ms)}]
    if isinstance(event, ev.LocksShown):
        return [{"event": "locks", "step": event.index + 1, "columns": list(event.columns),
                 "rows": [list(r) for r in event.rows], "note": event.note}]
    if isinstance(event, ev.RunFinished):
        return [{"event": "run_finished", "time_ms": _ms(event.elapsed_ms)}]
    return []


def _completed(event: ev.Completed) -> list[dict]:
    base = {"time_ms": _ms(event.at_ms), "step": event.index + 1, "session": event.session}
    statement = {"event": "statement", **base, "statement": event.sql, **result_record(event.result)}
    if event.waited_ms is None:
        return [statement]
    wait_end = {"event": "wait_end", **base, "waited_ms": _ms(event.waited_ms), "blockers": list(event.blockers)}
    return [wait_end, {**statement, "waited_ms": _ms(event.waited_ms)}]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class JsonEventsView:
    def __init__(self, stream):
        self.stream = stream

    def write(self, event) -> None:
        for record in records(event):
            self.stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.stream.flush()
