"""The schedules a plan allows, run on a server one by one until one shows the report's
cycle: the same waits (table, index, mode, kind), the same holders and the same victim.

Which inferred statements a schedule needs is not known in advance: a transaction's own last
statement may take the lock it held before waiting (an UPDATE locks a secondary index entry,
then waits for the row), and an inferred statement would then hold too much. So each subset
of the inferred statements is tried, most first, with each order of the waiting statements.
"""

from __future__ import annotations

import itertools
from contextlib import closing
from dataclasses import dataclass

from ..errors import NotReproduced, ReportError, ScenarioError, StuckError
from ..run import events as ev
from ..run.driver import Run, RunOptions
from ..run.record import rewrite
from ..run.verify import check, outcomes
from ..scenario.loader import scenario_from_text
from .build import Plan, lesson_text
from .report import ReportLock

MAX_SCHEDULES = 48
# A row wait, in a PostgreSQL log's words (the holder's transaction, the tuple) and the lock view's.
ROW_WAITS = ("transactionid", "tuple", "row")


@dataclass
class Replayed:
    text: str  # the lesson, its expectations recorded
    cycle: list[str]  # the deadlock as the server told it
    tried: int  # schedules run before this one reproduced it


def replay(plan: Plan, server, step_timeout: float, verified: str, path: str) -> Replayed:
    """The lesson that reproduces the report's cycle on `server`; NotReproduced, with the
    closest schedule's differences, when none of the schedules does."""
    closest: tuple[tuple[bool, int], int, list[str]] | None = None
    tried = 0
    for tried, (prefixed, order) in enumerate(_schedules(plan), 1):
        text = lesson_text(plan, prefixed, order)
        events, stuck = _run(text, path, server, step_timeout)
        differences, cycle = _compare(plan, events, stuck)
        if not differences:
            return Replayed(_recorded(plan, prefixed, order, cycle, path, server, step_timeout, verified), cycle, tried)
        rank = (not cycle, len(differences))  # a deadlock that differs is closer than none
        if closest is None or rank < closest[0]:
            closest = (rank, tried, differences)
    _rank, number, differences = closest or ((True, 0), 0, ["no schedule could be built"])
    raise NotReproduced(
        f"{plan.source}: not reproduced on {server.label} in {tried} schedules; the closest "
        f"(schedule {number}) differs: " + "; ".join(differences)
    )


def _schedules(plan: Plan):
    """(sessions whose inferred statement runs, order of the waiting statements): every
    inferred statement first, then fewer; within each, the report's last party waiting first
    (both servers number the cycle from the transaction that closed it)."""
    inferable = [p.session for p in plan.parts if p.prefix]
    sessions = [p.session for p in plan.parts]
    orders = list(itertools.permutations(reversed(sessions)))
    count = 0
    for size in range(len(inferable), -1, -1):
        for prefixed in itertools.combinations(inferable, size):
            for order in orders:
                count += 1
                if count > MAX_SCHEDULES:
                    return
                yield frozenset(prefixed), order


def _run(text: str, path: str, server, step_timeout: float) -> tuple[list, str | None]:
    try:
        scenario = scenario_from_text(path, text).for_engine(server.engine)
    except ScenarioError as e:  # a statement of the report the loader's SQL guard refuses
        raise ReportError(path, f"the lesson made from the report would not load: {e.detail}") from None
    events: list = []
    try:
        with closing(Run(scenario, server, RunOptions(step_timeout=step_timeout)).events()) as stream:
            events.extend(stream)
    except StuckError as e:
        return events, str(e)
    return events, None


def _compare(plan: Plan, events: list, stuck: str | None) -> tuple[list[str], list[str]]:
    """What differs from the report's cycle (nothing when it reproduced), and the cycle's lines."""
    broken = [e for e in events if isinstance(e, ev.Completed) and e.result.error is not None
              and e.result.error.error_class == "deadlock"]
    failed = [e for e in events if isinstance(e, ev.Completed) and e.result.error is not None and e not in broken]
    if not broken:
        why = stuck or (f"{failed[0].session}'s statement failed: {failed[0].result.error}" if failed else "every statement completed")
        return [f"no deadlock ({why})"], []
    event = broken[0]
    victim = plan.part(plan.report.victim)
    out = [f"{e.session}'s inferred statement waited" for e in events
           if isinstance(e, ev.Waiting) and any(e.sql == p.prefix for p in plan.parts)]
    if event.session != victim.session:
        out.append(f"the server rolled back {event.session}, the report {victim.session}")
    elif event.sql != victim.statement:
        out.append(f"the deadlock broke {event.session}'s inferred statement, not the report's")
    if failed:
        out.append(f"{failed[0].session}'s statement failed: {failed[0].result.error}")
    if stuck:
        out.append(f"after the deadlock the run got stuck ({stuck})")
    cycle = event.deadlock
    if cycle is None:
        return out + ["the server's account of the cycle could not be read"], []
    for part in plan.parts:
        seen = next((p for p in cycle.parties if p.session == part.session), None)
        if seen is None:
            out.append(f"{part.session} is not in the server's cycle")
            continue
        out += _lock_differences(part.session, "waited for", seen.waits_for, part.party.waits, plan.innodb)
        holder = plan.part(part.party.blocked_by)
        blocker = cycle.party(seen.blocked_by)
        if holder is not None and (blocker is None or blocker.session != holder.session):
            out.append(f"{part.session} was blocked by {cycle.name(seen.blocked_by)}, in the report by {holder.session}")
        elif holder is not None and holder.party.holds is not None and blocker.held is not None:
            out += _lock_differences(holder.session, "held", blocker.held, holder.party.holds, plan.innodb)
    return out, cycle.lines()


def _lock_differences(session: str, verb: str, seen, wanted: ReportLock | None, mysql: bool) -> list[str]:
    if wanted is None:
        return []
    if seen is None:
        return [f"the server did not print what {session} {verb}"]
    if mysql:
        supremum = wanted.record is not None and wanted.record.supremum
        same = (seen.table, seen.index, seen.mode, seen.kind) == (wanted.table, wanted.index, wanted.mode, wanted.kind) \
            and (seen.record == "supremum") == supremum
    else:
        same = _same_pg_wait(seen, wanted)
    if same:
        return []
    return [f"{session} {verb} {seen.text()}, in the report {wanted.text()}"]


def _same_pg_wait(seen, wanted: ReportLock) -> bool:
    """PostgreSQL's log names a row wait by the transaction that holds the row (ShareLock on
    it), the server's lock view by the row and the strength asked: the same wait when both
    are row waits on the same tuple of the same table, as far as the report names them."""
    if wanted.kind not in ROW_WAITS:
        return (seen.mode, seen.kind) == (wanted.mode, wanted.kind)
    place = wanted.record.tuple_id.strip("()") if wanted.record is not None else ""
    return seen.kind in ROW_WAITS and (not wanted.table or seen.table == wanted.table) \
        and (not place or str(seen.record).strip("()") == place)


def _recorded(plan: Plan, prefixed, order, cycle: list[str], path: str, server, step_timeout: float, verified: str) -> str:
    """The reproducing schedule's lesson, with the cycle told, its expectations recorded from
    a run of that text and checked against a second run."""
    told = "; ".join(line.strip() for line in cycle)
    text = lesson_text(plan, prefixed, order, [f"The same cycle as the report's, as the server tells it: {told}."])
    events, stuck = _run(text, path, server, step_timeout)
    if stuck is not None or _compare(plan, events, stuck)[0]:
        raise NotReproduced(f"{plan.source}: the schedule that reproduced the cycle did not on a second run ({stuck or 'another cycle'})")
    scenario = scenario_from_text(path, text).for_engine(server.engine)
    recorded = rewrite(scenario, outcomes(events), verified)
    events, stuck = _run(recorded, path, server, step_timeout)
    mismatches = check(scenario_from_text(path, recorded).for_engine(server.engine), events)
    if stuck is not None or mismatches:
        raise NotReproduced(f"{plan.source}: the lesson's recorded expectations did not hold on a third run "
                            f"({stuck or mismatches[0]}): the deadlock does not replay the same way each time")
    return recorded
