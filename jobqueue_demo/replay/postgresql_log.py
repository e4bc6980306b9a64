"""PostgreSQL's account of a deadlock: the server log's lines, or the client's error.

The log (any log_line_prefix) has the victim's `ERROR:  deadlock detected`, a DETAIL whose
lines go on indented by a tab (each process's wait, then each process's statement), and a
CONTEXT naming the tuple the victim waited for. With log_lock_waits on, a process that
waited past deadlock_timeout has its own `still waiting` lines, whose CONTEXT names its
tuple. The client's error (psql's `ERROR:`/`DETAIL:` lines) has the waits but no
statements: PostgreSQL sends those to the log only. Read line by line; nothing is matched
with a pattern that could backtrack.
"""

from __future__ import annotations

from ..errors import ReportError
from .report import DeadlockReport, Record, ReportLock, ReportParty

ENGINE = "postgresql"
ERROR = "ERROR:  deadlock detected"
LABELS = ("DETAIL:  ", "HINT:  ", "CONTEXT:  ", "STATEMENT:  ", "LOG:  ", "ERROR:  ", "LOCATION:  ", "WARNING:  ")
# pg_locks' locktype for each object a wait names
LOCKTYPES = {"transaction": "transactionid", "tuple": "tuple", "relation": "relation", "advisory lock": "advisory",
             "virtual transaction": "virtualxid", "extension of relation": "extend", "object": "object"}


def detect(text: str) -> bool:
    return ERROR in text or "detected deadlock while waiting" in text


def read(path: str, text: str) -> DeadlockReport:
    lines = text.splitlines()
    at = next((i for i in range(len(lines) - 1, -1, -1) if ERROR in lines[i]), None)  # the latest of several
    if at is None:
        raise ReportError(path, "no 'ERROR:  deadlock detected' line: the report is cut short before PostgreSQL's error")
    prefix = lines[at][: lines[at].find(ERROR)]
    parts = _parts(lines, at, prefix)
    detail = parts.get("DETAIL")
    if not detail:
        raise ReportError(path, "the deadlock's DETAIL is missing: it names each process's wait", at + 1)
    waits, statements = _detail(path, detail, at + 2)
    tuples = _still_waiting(lines)
    victim_pid = waits[0][0]
    if "CONTEXT" in parts:
        tuples.setdefault(victim_pid, _tuple(parts["CONTEXT"][0]))
    log_form = bool(statements)
    if not log_form:
        raise ReportError(path, "the client's error names no statements (PostgreSQL prints them in the server "
                          "log only): give the server log's lines, from 'ERROR:  deadlock detected' through its DETAIL", at + 1)
    numbers = {pid: n for n, (pid, *_rest) in enumerate(waits, 1)}
    parties = []
    for pid, mode, what, blocker in waits:
        if not (pid.isdigit() and blocker.isdigit()):
            raise ReportError(path, f"a DETAIL line whose process ids are not numbers ({pid!r}, {blocker!r})", at + 2)
        if pid not in statements:
            raise ReportError(path, f"the DETAIL names no statement for process {pid}: the report is cut short", at + 2)
        if blocker not in numbers:
            raise ReportError(path, f"process {pid} waits for process {blocker}, which the DETAIL does not list", at + 2)
        kind = LOCKTYPES.get(what.split(" ")[0] if not what.startswith(("advisory", "virtual", "extension")) else
                             " ".join(what.split(" ")[:2 if not what.startswith("extension") else 3]), what.split(" ")[0])
        table, place = tuples.get(pid, ("", ""))
        lock = ReportLock(table, "", mode, kind, Record(tuple_id=place) if place else None, what)
        parties.append(ReportParty(numbers[pid], "", pid, statements[pid], lock, None, numbers[blocker]))
    return DeadlockReport(ENGINE, "PostgreSQL server log", tuple(_with_holds(parties)), numbers[victim_pid], innodb=False)


def _parts(lines: list[str], at: int, prefix: str) -> dict[str, list[str]]:
    """The error's labelled parts (DETAIL, HINT, CONTEXT, STATEMENT), each with its continued lines."""
    parts: dict[str, list[str]] = {}
    current = None
    for line in lines[at + 1: at + 400]:
        body = line[len(prefix):] if prefix and line.startswith(prefix) else line
        label = next((lab for lab in LABELS if body.startswith(lab)), None)
        if label is not None:
            if label in ("LOG:  ", "ERROR:  ", "WARNING:  ") or label.rstrip(": ") in parts:
                break
            current = label.rstrip(": ")
            parts[current] = [body[len(label):]]
        elif current is not None and (line.startswith("\t") or not prefix):
            parts[current].append(line[1:] if line.startswith("\t") else line)
        else:
            break
    return parts


def _detail(path: str, detail: list[str], line: int):
    """[(pid, mode, object, blocking pid)], {pid: statement} from the DETAIL's lines."""
    waits, statements, current = [], {}, None
    for text in detail:
        words = text.split(" ")
        if text.startswith("Process ") and " waits for " in text and "; blocked by process " in text:
            pid = words[1]
            wait = text.split(" waits for ", 1)[1]
            mode, _, rest = wait.partition(" on ")
            what, _, blocker = rest.partition("; blocked by process ")
            waits.append((pid, mode, what, blocker.rstrip(".")))
            current = None
        elif text.startswith("Process ") and len(words) > 1 and words[1].rstrip(":").isdigit() and words[1].endswith(":"):
            current = words[1].rstrip(":")
            statements[current] = text.split(": ", 1)[1] if ": " in text else ""
        elif current is not None:
            statements[current] += "\n" + text
        else:
            raise ReportError(path, f"a DETAIL line this does not read: {text[:100]!r}", line)
    if len(waits) < 2:
        raise ReportError(path, "the DETAIL names fewer than two waiting processes: the report is cut short", line)
    return waits, {pid: s.strip() for pid, s in statements.items()}


def _still_waiting(lines: list[str]) -> dict[str, tuple[str, str]]:
    """pid -> (relation, tuple) from log_lock_waits' lines: 'process N still waiting for …' and its CONTEXT."""
    out = {}
    for i, line in enumerate(lines):
        marker = next((m for m in (" still waiting for ", " detected deadlock while waiting for ") if m in line), None)
        if marker is None or "process " not in line:
            continue
        pid = line.split("process ", 1)[1].split(" ", 1)[0]
        for after in lines[i + 1: i + 4]:
            if "CONTEXT:  " in after:
                out.setdefault(pid, _tuple(after.split("CONTEXT:  ", 1)[1]))
                break
    return out


def _tuple(context: str) -> tuple[str, str]:
    """('jobs', '(0,2)') from 'while updating tuple (0,2) in relation "jobs"'; ('', '') if it names none."""
    if " tuple (" not in context or ' in relation "' not in context or "index tuple" in context:
        return "", ""  # an index tuple's relation is the index, its place the inserter's new row
    place = "(" + context.split(" tuple (", 1)[1].split(")", 1)[0] + ")"
    relation = context.split(' in relation "', 1)[1].split('"', 1)[0]
    return relation, place


def _with_holds(parties: list[ReportParty]) -> list[ReportParty]:
    """What each holds, as the party blocked by it waits for it: its transaction, on that tuple."""
    out = []
    for party in parties:
        waiter = next((p for p in parties if p.blocked_by == party.number), None)
        holds = waiter.waits if waiter is not None else None
        own = holds.trx_id.split(" ")[-1] if holds is not None else ""
        out.append(ReportParty(party.number, own, party.thread_id, party.statement, party.waits, holds,
                               party.blocked_by))
    return out
