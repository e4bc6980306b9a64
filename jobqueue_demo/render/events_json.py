"""The run as JSON Lines, for other tools: one object per line, written as things happen.

Every object has `event`; times are `time_ms`, milliseconds since the run started, and steps
are numbered from 1 as `verify` numbers them. A statement that waited on a lock gives a
`wait_start` when the wait is seen (`blockers`, and in `edges` how each blocks: it `holds` a
conflicting lock, or its own request is `queued ahead`) and a `wait_end` just before its `statement` result. A
deadlock victim's `statement` is followed by a `deadlock` (the cycle the server broke); on a
Galera node, a 1213's `error` says what it was in `rolled_back_by` (`deadlock`, `certification
failure` or `brute-force abort`, from the node's counters), and only a deadlock has a cycle.
A run that cannot go on ends with a `stuck` (the whole waits-for chain). On PostgreSQL a
result carries the command tag (`tag`: `ROLLBACK` for a COMMIT of a failed transaction), the
statement's `notices` (`warnings` counts them), and a step of several statements the results
before its last under `earlier`.
"""

from __future__ import annotations

import datetime
import json

from ..engine.caps import MAX_RESULT_BYTES, MAX_VALUE_BYTES
from ..engine.types import Result
from ..run import events as ev


def result_record(result: Result) -> dict:
    """A statement's result; a step of several statements (PostgreSQL) lists the others'
    first, under `earlier`."""
    record = _one_record(result)
    if result.earlier:
        record["earlier"] = [_one_record(each) for each in result.earlier]
    return record


def _one_record(result: Result) -> dict:
    if result.error is not None:
        error = result.error
        # `errno` is 0 on PostgreSQL, whose errors have a SQLSTATE only; `class` is portable.
        record = {"error": {"errno": error.errno, "sqlstate": error.sqlstate, "message": error.message,
                            "name": error.name, "class": error.error_class}}
    else:
        out: dict = {"affected": result.affected, "warnings": result.warnings}
        if result.is_rows:
            out = {"columns": list(result.columns), "rows": [list(r) for r in result.rows], **out}
            if result.omitted:
                out["rows_not_shown"] = result.omitted
            if result.capped:
                out["rows_not_shown_past_bytes"] = MAX_RESULT_BYTES
            if result.cut:
                # Each cut value ends with "… (N bytes more)".
                out["values_cut"] = result.cut
                out["values_cut_to_bytes"] = MAX_VALUE_BYTES
        # PostgreSQL's command tag: `ROLLBACK` says a COMMIT did not commit.
        if result.tag is not None:
            out["tag"] = result.tag
        record = {"result": out}
    if result.notices:
        record["notices"] = list(result.notices)
    return record


def records(event) -> list[dict]:
    """What one run event (run/events.py) says, as JSON-ready objects (none for the step markers)."""
    if isinstance(event, ev.RunStarted):
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        return [{"event": "run_started", "title": event.title, "server": event.server,
                 "database": event.database, "started_at": started}]
    if isinstance(event, ev.Waiting):
        return [{"event": "wait_start", "time_ms": _ms(event.at_ms), "step": event.index + 1,
                 "session": event.session, "statement": event.sql, "lock_kind": event.kind,
                 "lock": event.lock or None, "requested_mode": event.requested or None,
                 "blockers": list(event.blockers), "edges": [_edge(e) for e in event.edges]}]
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
    if isinstance(event, ev.LocksTaken):
        return [{"event": "locks_taken", "step": event.index + 1, "session": event.session,
                 "returned": event.returned, "read": event.read, "locked": event.locked, "held": event.held}]
    if isinstance(event, ev.Stuck):
        return [_stuck(event)]
    if isinstance(event, ev.RunFinished):
        return [{"event": "run_finished", "time_ms": _ms(event.elapsed_ms)}]
    return _spec_records(event)


def _spec_records(event) -> list[dict]:
    """An isolation spec's own events (run/spec_run.py)."""
    if isinstance(event, ev.PermutationStarting):
        return [{"event": "permutation", "steps": list(event.steps)}]
    if isinstance(event, ev.Noticed):
        return [{"event": "notices", "session": event.session, "notices": list(event.lines)}]
    if isinstance(event, ev.Notified):
        return [{"event": "notify", "session": event.session, "channel": event.channel,
                 "payload": event.payload, "sender": event.sender}]
    if isinstance(event, ev.StepCanceled):
        return [{"event": "canceled", "session": event.session, "step": event.step, "seconds": event.seconds}]
    if isinstance(event, ev.ScriptAnswered):
        return [{"event": event.what, "session": event.session, **result_record(event.result)}]
    return []


def _edge(edge: ev.Blocker) -> dict:
    """One blocker: `holds` a conflicting lock (`mode`: the mode it holds), or is `queued ahead`
    (`mode`: the mode its request asks for, `statement` and `waits_for`: that request's)."""
    out = {"session": edge.session, "edge": edge.how, "mode": edge.mode or None}
    if edge.how == ev.QUEUED:
        out.update(statement=edge.statement or None, waits_for=list(edge.waits_for))
    return out


def _completed(event: ev.Completed) -> list[dict]:
    base = {"time_ms": _ms(event.at_ms), "step": event.index + 1, "session": event.session}
    statement = {"event": "statement", **base, "statement": event.sql, **result_record(event.result)}
    if event.rollback is not None:
        statement["error"]["rolled_back_by"] = event.rollback
    cycle = [_deadlock(event)] if event.deadlock else []
    if event.waited_ms is None:
        return [statement, *cycle]
    wait_end = {"event": "wait_end", **base, "waited_ms": _ms(event.waited_ms), "blockers": list(event.blockers)}
    return [wait_end, {**statement, "waited_ms": _ms(event.waited_ms)}, *cycle]


def _deadlock(event: ev.Completed) -> dict:
    """The cycle as the server told it: each transaction, what it waited for, and who held it."""
    found = event.deadlock
    parties = [{"session": p.session or None, "thread_id": p.thread_id, "statement": p.statement,
                "waits_for": _lock(p.waits_for), "held": _lock(p.held),
                "blocked_by": found.name(p.blocked_by)} for p in found.parties]
    return {"event": "deadlock", "step": event.index + 1, "session": event.session,
            "victim": found.name(found.victim), "transactions": parties}


def _lock(lock) -> dict | None:
    if lock is None:
        return None
    return {"table": lock.table, "index": lock.index or None, "mode": lock.mode, "kind": lock.kind,
            "record": lock.record or None}


def _stuck(event: ev.Stuck) -> dict:
    found = event.chain
    return {"event": "stuck", "step": event.index + 1, "what": event.what,
            "waits": [{"session": k.session, "waits_for": list(k.blockers), "queued_behind": list(k.queued), "lock_kind": k.kind,
                       "lock": k.lock or None, "statement": k.statement} for k in found.links],
            "holders": [{"session": h.session, "state": h.state} for h in found.holders],
            "cycle": found.cycle}


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class JsonEventsView:
    def __init__(self, stream):
        self.stream = stream

    def write(self, event) -> None:
        for record in records(event):
            self.stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.stream.flush()
