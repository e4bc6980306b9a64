"""The lesson a report becomes: its schema and rows, and per transaction the statement that
takes the lock it held (inferred: a report shows each transaction's last statement only)
before the statement it waited in. One text per schedule search.py tries."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from ..engine.sql_lexer import END, OPEN, QUOTED, UNCLEAR, WORD, tokens
from ..engine.types import GAP_ONLY, INSERT_INTENTION_ONLY, NEXT_KEY, RECORD, WHOLE_TABLE
from ..errors import ReportError
from ..scenario.fault_kinds import WAIT
from .keys import TEXT_TYPES, Undecodable, literal, quoted_name, text_literal
from .report import DeadlockReport, ReportLock, ReportParty
from .schema import PRIMARY, Table

ROW_STATEMENTS = ("SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH")
MAX_PARTIES = 4
NUMBER_TYPES = ("decimal", "numeric", "float", "double", "real")
MAX_PLACE = 200  # the most rows replay makes for a PostgreSQL report's tuples
REPEATABLE_READ, READ_COMMITTED = "repeatable-read", "read-committed"
# Waits out the first waiter's deadlock check, in whatever deadlock_timeout the server has.
PG_PAUSE = "SELECT pg_sleep(2 * extract(epoch FROM current_setting('deadlock_timeout')::interval));"


@dataclass
class Part:
    """One transaction of the report, as a session of the lesson."""

    session: str
    party: ReportParty
    statement: str
    prefix: str | None = None  # the inferred statement that takes the lock it held
    why: str = ""
    isolation: str = REPEATABLE_READ
    waits_at: str = ""  # the index record it waited for, decoded: "(state = 'queued', id = 4)"


@dataclass
class Plan:
    report: DeadlockReport
    source: str  # the report's file name, as the lesson names it
    setup: str
    parts: list[Part]
    rows_note: str

    @property
    def innodb(self) -> bool:
        return self.report.innodb

    def part(self, number: int | None) -> Part | None:
        return next((p for p in self.parts if p.party.number == number), None)


def plan(report: DeadlockReport, source: str, schema_path: str, schema: str, tables: dict[str, Table],
         rows: str | None) -> Plan:
    if len(report.parties) > MAX_PARTIES:
        raise ReportError(source, f"a cycle of {len(report.parties)} transactions: replay reproduces at most {MAX_PARTIES}")
    mysql = report.innodb
    for party in report.parties:
        for lock in (party.waits, party.holds):
            _check_lock(source, schema_path, lock, tables)
    isolation = REPEATABLE_READ if mysql else READ_COMMITTED  # each engine's default
    databases = {lock.database for p in report.parties for lock in (p.waits, p.holds) if lock is not None and lock.database}
    parts = [Part(chr(ord("A") + i), p, _unqualified(_statement(source, p, mysql), databases), isolation=isolation)
             for i, p in enumerate(report.parties)]
    synthesised = "" if rows is not None else _rows(source, report, tables) if mysql else _places(source, report, tables)
    for part in parts:
        _infer(source, part, report, tables, mysql)
        part.waits_at = _where(source, part.party, part.party.waits, tables) if mysql else ""
    setup = schema.rstrip() + "\n" + (rows.rstrip() + "\n" if rows else synthesised)
    note = "the rows given with --rows" if rows is not None else \
        ("rows made from the records the report prints" if mysql else
         "rows made for the tuples the report names, holding what each statement's equality conditions ask for") \
        if synthesised else "no rows: the report locks no record"
    return Plan(report, source, setup, parts, note)


def _check_lock(source: str, schema_path: str, lock: ReportLock | None, tables: dict[str, Table]) -> None:
    if lock is None or not lock.table:
        return
    table = tables.get(lock.table)
    if table is None:
        raise ReportError(schema_path, f"the report's locks are on table {lock.table!r}, which the schema does not create "
                          f"(it creates {', '.join(sorted(tables)) or 'no table'})")
    if lock.index and table.index(lock.index) is None:
        if lock.index == "GEN_CLUST_INDEX":
            raise ReportError(schema_path, f"the report's lock is on {lock.table}'s hidden clustered index "
                              "(GEN_CLUST_INDEX): replay needs a table with a primary key")
        raise ReportError(schema_path, f"the report's lock is on index {lock.index!r} of {lock.table}, which the schema "
                          f"lacks (its indexes: {', '.join(table.indexes) or 'none'})")


def _statement(source: str, party: ReportParty, mysql: bool) -> str:
    """The party's statement, when it is one row-locking statement: nothing else of a report runs."""
    text = party.statement.strip().rstrip(";").strip()
    if not text:
        raise ReportError(source, f"transaction ({party.number}) has no statement in the report (it was between statements)")
    if any(ord(c) < 32 and c not in "\n\t" or ord(c) == 127 for c in text):
        raise ReportError(source, f"the statement of transaction ({party.number}) holds a control character (binary "
                          "data, as the server printed it): it cannot be sent as written")
    found = list(tokens(text, mysql))
    if any(kind in (OPEN, UNCLEAR) for kind, *_ in found):
        cause = "has a $ (a parameter or dollar quoting), whose value the log does not hold" if not mysql and "$" in text \
            else "ends inside a quote or comment: the server cut it short"
        raise ReportError(source, f"the statement of transaction ({party.number}) {cause}")
    if any(kind == END for kind, *_ in found):
        raise ReportError(source, f"the statement of transaction ({party.number}) is several statements: replay runs "
                          "only the one statement each transaction waited in")
    first = next((t[3] for t in found if t[0] == WORD), "")
    if first not in ROW_STATEMENTS:
        raise ReportError(source, f"the statement of transaction ({party.number}) starts with {first or 'nothing'}: replay "
                          f"runs only {', '.join(ROW_STATEMENTS)} statements")
    return text + ";"


def _unqualified(statement: str, databases: set[str]) -> str:
    """The statement without the report's database before a table's name (`shop`.`jobs`,
    shop.jobs): the lesson's tables are in its own scratch database."""
    found = list(tokens(statement, True))
    cuts = [
        (name[1], dot[2]) for name, dot in zip(found, found[1:])
        if dot[3] == "." and (name[0] == WORD or (name[0] == QUOTED and name[3] == "`"))
        and (statement[name[1] + 1: name[2] - 1] if name[0] == QUOTED else statement[name[1]: name[2]]) in databases
    ]
    for start, end in reversed(cuts):
        statement = statement[:start] + statement[end:]
    return statement


def _rows(source: str, report: DeadlockReport, tables: dict[str, Table]) -> str:
    """INSERTs of the records the report's locks are on, decoded by the schema's types and
    merged by primary key; unknown columns get their default, or a filler where they have none."""
    rows: dict[str, dict[tuple, dict[str, str]]] = {}
    for party in report.parties:
        for lock in (party.waits, party.holds):
            if lock is None or lock.record is None or not lock.record.fields or not lock.index:
                continue
            table = tables[lock.table]
            if table.primary is None:
                raise ReportError(source, f"table {table.name} has no primary key in the schema: give the rows with --rows")
            values = _decoded(source, party, lock, table)
            key = tuple(values.get(c) for c in table.primary.columns)
            if None in key:
                continue
            rows.setdefault(table.name, {}).setdefault(key, {}).update(values)
    return "".join(_inserts(tables[name], [v for _k, v in sorted(by_key.items())], True) for name, by_key in rows.items())


def _places(source: str, report: DeadlockReport, tables: dict[str, Table]) -> str:
    """PostgreSQL names a row by its place only: in a fresh table the k-th row inserted is at
    (0,k). So row k of each table a process waited in holds the values its statement's
    equality conditions ask for (`WHERE task = '…'`); the others are filled."""
    wanted: dict[str, dict[int, dict[str, str]]] = {}
    for party in report.parties:
        lock = party.waits
        if lock is None or lock.record is None or not lock.record.tuple_id or lock.table not in tables:
            continue
        page, _, offset = lock.record.tuple_id.strip("()").partition(",")
        if page != "0" or not offset.isdigit() or not 0 < int(offset) <= MAX_PLACE:
            raise ReportError(source, f"process {party.thread_id} waited for tuple {lock.record.tuple_id}, past the rows "
                              "replay makes: give the table's rows with --rows, in the order they were inserted")
        equal = _equalities(party.statement, tables[lock.table])
        wanted.setdefault(lock.table, {}).setdefault(int(offset), {}).update(equal)
    if not wanted:
        raise ReportError(source, "the report names no tuple a process waited for (its CONTEXT lines are missing): "
                          "give the table's rows with --rows, in the order they were inserted")
    return "".join(_inserts(tables[name], [by_place.get(k, {}) for k in range(1, max(by_place) + 1)], False)
                   for name, by_place in wanted.items())


def _equalities(statement: str, table: Table) -> dict[str, str]:
    """`column = literal` of the statement's WHERE (a SET's are what it writes), for the
    table's columns: each literal as the statement wrote it."""
    found = list(tokens(statement, False))
    where = next((n for n, t in enumerate(found) if t[0] == WORD and t[3] == "WHERE"), len(found))
    found = found[where:]
    out = {}
    for before, equals, value in zip(found, found[1:], found[2:]):
        name = before[3].lower() if before[0] == WORD else statement[before[1] + 1: before[2] - 1]
        if equals[3] == "=" and name in table.columns and (
            (value[0] == QUOTED and value[3] == "'") or (value[0] == WORD and value[3].replace(".", "", 1).isdigit())
        ):
            out.setdefault(name, statement[value[1]: value[2]])
    return out


def _inserts(table: Table, rows: list[dict[str, str]], mysql: bool) -> str:
    """One INSERT of the rows, in order; a column a row does not give gets its DEFAULT or a
    filler no other row's key holds."""
    columns = list(table.columns)
    used = {c: {r[c] for r in rows if c in r} for c in columns}
    lines = []
    for n, values in enumerate(rows, 1):
        filled = []
        for c in columns:
            value = values.get(c) or _filler(table, c, n)
            while value in used[c] and c not in values and value.isdigit():
                value = str(int(value) + len(rows))  # a filled key must not repeat another row's
            filled.append(value)
        lines.append("(" + ", ".join(filled) + ")")
    names = ", ".join(quoted_name(c, mysql) for c in columns)
    return f"INSERT INTO {quoted_name(table.name, mysql)} ({names}) VALUES\n  " + ",\n  ".join(lines) + ";\n"


def _decoded(source: str, party: ReportParty, lock: ReportLock, table: Table) -> dict[str, str]:
    names = table.record_fields(table.index(lock.index))
    values = {}
    for name, field in zip(names, lock.record.fields):
        if name is None:
            continue
        try:
            values[name] = literal(field, table.columns[name])
        except Undecodable as e:
            if name in (table.primary.columns if table.primary else ()):
                raise ReportError(source, f"transaction ({party.number})'s lock on {table.name} {lock.index}: {e}") from None
    return values


def _filler(table: Table, name: str, n: int) -> str:
    column = table.columns[name]
    if column.default is not None or column.nullable:
        return "DEFAULT"  # the server's own, however the schema spells it (now(), a sequence)
    if "int" in column.type or "serial" in column.type or column.type in NUMBER_TYPES:
        return str(n)
    if column.type == "enum" and column.values:
        return text_literal(column.values[0])
    if column.type in ("datetime", "timestamp"):
        return "'2000-01-01 00:00:00'"
    if column.type == "date":
        return "'2000-01-01'"
    return text_literal(f"row {n}") if column.type in TEXT_TYPES else "''"


def _infer(source: str, part: Part, report: DeadlockReport, tables: dict[str, Table], mysql: bool) -> None:
    """The narrowest statement that takes the lock the party held, with why; none where the
    report holds none this can take (an insert intention is only ever waited for)."""
    lock = part.party.holds
    if lock is None or lock.kind in (INSERT_INTENTION_ONLY, WHOLE_TABLE):
        return
    if not mysql:
        if lock.record is not None and lock.record.tuple_id:
            table = tables.get(lock.table)
            key = table.primary.columns if table is not None and table.primary else ("ctid",)
            part.prefix = (f"SELECT {', '.join(quoted_name(c, False) for c in key)} FROM {quoted_name(lock.table, False)} "
                           f"WHERE ctid = '{lock.record.tuple_id}' FOR UPDATE;")
            part.why = (f"inferred: the row at {lock.record.tuple_id} of {lock.table}, which the report's other "
                        "transaction waited for, locked earlier in this transaction")
        return
    table = tables[lock.table]
    index = table.index(lock.index)
    force = "" if index.name == PRIMARY else f" FORCE INDEX ({quoted_name(index.name, True)})"
    pk = ", ".join(quoted_name(c, True) for c in (table.primary.columns if table.primary else index.columns))
    locking = " FOR UPDATE;" if lock.mode.startswith("X") else " LOCK IN SHARE MODE;"
    head = f"SELECT {pk} FROM {quoted_name(table.name, True)}{force}"
    what = f"the {lock.mode} {lock.kind} lock on {table.name} {index.name}"
    if lock.record is not None and lock.record.supremum:
        order = ", ".join(f"{quoted_name(c, True)} DESC" for c in table.record_fields(index) if c is not None)
        part.prefix = f"{head} ORDER BY {order} LIMIT 1{locking}"
        part.why = f"inferred: a locking read from the end of {index.name} takes {what} before its supremum"
        return
    if lock.record is None or not lock.record.fields:
        return
    values = _decoded(source, part.party, lock, table)
    columns = [c for c in table.record_fields(index) if c is not None][: len(index.columns) if index.unique else None]
    if any(c not in values for c in columns):
        return
    conditions = [f"{quoted_name(c, True)} = {values[c]}" for c in columns]
    if lock.kind == GAP_ONLY:
        below = _just_below(values[columns[-1]])
        if below is None:
            return
        conditions[-1] = f"{quoted_name(columns[-1], True)} = {below}"
    elif lock.kind == RECORD and not index.unique:
        part.isolation = READ_COMMITTED  # a locking read there takes the record alone only without gap locks
    elif lock.kind == NEXT_KEY and index.unique:
        # Equality on a unique key takes the record alone, and a range up to it the record
        # after it too; read down from it, InnoDB takes the record and the gap before it,
        # and of the record after it only the gap.
        name = quoted_name(columns[-1], True)
        conditions[-1] = f"{name} <= {values[columns[-1]]} ORDER BY {name} DESC LIMIT 1"
    part.prefix = f"{head} WHERE {' AND '.join(conditions)}{locking}"
    part.why = f"inferred: the narrowest statement that takes {what}"


def _where(source: str, party: ReportParty, lock: ReportLock | None, tables: dict[str, Table]) -> str:
    """The index record an InnoDB lock is on, its key decoded: "(state = 'queued', id = 4)"."""
    if lock is None or lock.record is None or not lock.index or lock.record.supremum:
        return ""
    table = tables[lock.table]
    index = table.index(lock.index)
    key = list(index.columns) + [c for c in (table.primary.columns if table.primary else ()) if c not in index.columns]
    values = _decoded(source, party, lock, table)
    return "(" + ", ".join(f"{c} = {values[c]}" for c in key if c in values) + ")"


def _just_below(value: str) -> str | None:
    """A value that sorts right before `value` (an integer, or a quoted text), for a gap lock's search."""
    if value.lstrip("-").isdigit():
        return str(int(value) - 1)
    if value.startswith("'") and len(value) > 2:
        return value[:-2] + "'" if not value[:-1].endswith("''") else None
    return None


def lesson_text(plan: Plan, prefixed: frozenset[str], order: tuple[str, ...], cycle: list[str] | None = None) -> str:
    """The lesson for one schedule: the prefixes of the sessions in `prefixed`, then each
    session's waiting statement in `order`. `cycle`: the lines that tell the deadlock seen."""
    report, mysql = plan.report, plan.innodb
    victim = plan.part(report.victim)
    steps: list[dict] = [{"narrate": _intro(plan)}]
    steps += [{p.session: "BEGIN;", "expect": "ok"} for p in plan.parts]
    for part in plan.parts:
        if part.session in prefixed and part.prefix:
            steps.append({part.session: part.prefix, "comment": part.why})
    for n, session in enumerate(order):
        part = next(p for p in plan.parts if p.session == session)
        if not mysql and n == len(order) - 1 and part is victim:
            steps.append({session: PG_PAUSE, "comment": "lets the others' deadlock checks pass (deadlock_timeout): "
                          "PostgreSQL's victim is the process whose check finds the cycle"})
        steps.append({session: part.statement, "comment": f"transaction ({part.party.number})'s statement in the report"})
    if cycle:
        steps.append({"narrate": " ".join(cycle)})
    for part in _unblocked(plan, victim):
        steps += [{WAIT.name: part.session}, {part.session: "COMMIT;", "expect": "ok"}]
    steps.append({victim.session: "COMMIT;", "expect": "ok"})
    lesson = {
        "title": f"Replayed deadlock: {_summary(plan)}",
        "engines": [report.engine],
        "summary": f"The deadlock of {plan.source} ({report.form}), replayed: {_summary(plan)}.",
        "setup": plan.setup,
        "sessions": {p.session: {"isolation": p.isolation} for p in plan.parts},
        "steps": steps,
    }
    return yaml.dump(lesson, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def _unblocked(plan: Plan, victim: Part) -> list[Part]:
    """The others in the order the victim's rollback frees them: the one that waited for the
    victim goes on, and its commit frees the one that waited for it, back round the cycle."""
    out: list[Part] = []
    freed = victim
    while True:
        waiter = next((p for p in plan.parts if p.party.blocked_by == freed.party.number), None)
        if waiter is None or waiter is victim or waiter in out:
            return out + [p for p in plan.parts if p is not victim and p not in out]
        out.append(waiter)
        freed = waiter


def _summary(plan: Plan) -> str:
    waits = "; ".join(f"{p.session} waits for {p.party.waits.text()}" for p in plan.parts if p.party.waits is not None)
    return f"{waits}; {plan.part(plan.report.victim).session} is rolled back"


def _intro(plan: Plan) -> str:
    names = ", ".join(f"{p.session} is transaction ({p.party.number}) (thread {p.party.thread_id}), which waited for "
                      f"{p.party.waits.text() if p.party.waits else 'a lock'}" + (f" at {p.waits_at}" if p.waits_at else "")
                      for p in plan.parts)
    return (f"Replayed from {plan.source}, a {plan.report.form} report: {names}. The setup holds the schema and "
            f"{plan.rows_note}. A report shows each transaction's last statement only; a statement whose "
            "comment says inferred takes the lock that transaction held before it.")


class _Dumper(yaml.SafeDumper):
    """Safe YAML, multi-line text as a block: the lesson reads as one written by hand."""


def _text(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value.strip("\n") or value.endswith("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)
