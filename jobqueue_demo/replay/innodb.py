"""InnoDB's account of a deadlock, as MariaDB 10.6+ and MySQL 8.0/8.4 print it: the LATEST
DETECTED DEADLOCK section of SHOW ENGINE INNODB STATUS, or the error log's copy
(innodb_print_all_deadlocks), whose lines may carry the log's prefix.

Read line by line, each line looked at a bounded number of times: the text is untrusted.
MariaDB lists under each transaction the lock it waits for and, under "CONFLICTING WITH:",
the locks in its way, each naming its transaction. MySQL 8 lists "*** (N) HOLDS THE
LOCK(S):" and "*** (N) WAITING FOR THIS LOCK TO BE GRANTED:". The MySQL form is read as the
MySQL 8.4 manual documents it (17.7.5.1, An InnoDB Deadlock Example); no MySQL server runs
here to make one.
"""

from __future__ import annotations

from ..engine.types import GAP_ONLY, INSERT_INTENTION_ONLY, NEXT_KEY, RECORD, WHOLE_TABLE
from ..errors import ReportError
from .report import DeadlockReport, Field, Record, ReportLock, ReportParty

ENGINE = "mysql"
LOG_MARKERS = ("[Note] InnoDB: ", "[InnoDB] ")  # MariaDB's and MySQL 8's error log prefixes
SECTION_STARTS = ("LATEST DETECTED DEADLOCK", "Transactions deadlock detected")
MARIADB, MYSQL = "MariaDB 10.6+", "MySQL 8.0/8.4"
SUPREMUM_HEX = "73757072656d756d"
WAITING, HOLDS, CONFLICTING = "WAITING FOR THIS LOCK TO BE GRANTED:", "HOLDS THE LOCK(S):", "CONFLICTING WITH:"


def detect(text: str) -> bool:
    return "*** (1) TRANSACTION:" in text or any(start in text for start in SECTION_STARTS)


def read(path: str, text: str) -> DeadlockReport:
    lines = [_unprefixed(line) for line in text.splitlines()]
    start = _section_start(lines)
    parties: list[_Party] = []
    victim, lock, part, ended = None, None, None, False
    for number, line in enumerate(lines[start:], start + 1):
        if line.startswith("*** WE ROLL BACK TRANSACTION ("):
            victim = _number_in(line, path, number)
            ended = True
            break
        if parties and _is_next_section(lines, number - 1):
            break
        if line.startswith("*** (") and line.endswith(") TRANSACTION:"):
            parties.append(_Party(_number_in(line, path, number), number))
            part, lock = None, None
        elif not parties:
            continue
        elif line.startswith("*** "):
            part = _part(line, path, number)
            lock = None
        elif part is None:
            parties[-1].header(line)
        elif line.startswith(("RECORD LOCKS ", "TABLE LOCK ")):
            lock = _Lock(line, path, number)
            parties[-1].parts.setdefault(part, []).append(lock)
        elif lock is not None:
            lock.body(line, path, number)
    return _report(path, parties, victim, ended, start)


def _unprefixed(line: str) -> str:
    for marker in LOG_MARKERS:
        at = line.find(marker)
        if at >= 0:
            return line[at + len(marker):]
    return line


def _section_start(lines: list[str]) -> int:
    """Where the last deadlock's first transaction starts: an error log may hold many, the
    latest last."""
    starts = [i for i, line in enumerate(lines) if line.startswith("*** (1) TRANSACTION:")]
    return starts[-1] if starts else 0


def _is_next_section(lines: list[str], i: int) -> bool:
    """A monitor section's title ("TRANSACTIONS") between two lines of dashes: the end of the deadlock's."""
    return (
        0 < i < len(lines) - 1 and lines[i - 1].startswith("----") and lines[i + 1].startswith("----")
        and lines[i].isupper()
    )


def _number_in(line: str, path: str, number: int) -> int:
    inside = line[line.find("(") + 1: line.find(")")]
    if not inside.isdigit() or len(inside) > 4:
        raise ReportError(path, f"expected a transaction's number in {_shown(line)}", number)
    return int(inside)


def _part(line: str, path: str, number: int) -> str:
    body = line[4:]
    if body.startswith("("):  # MySQL: "*** (1) HOLDS THE LOCK(S):"
        body = body[body.find(")") + 2:]
    if body not in (WAITING, HOLDS, CONFLICTING):
        raise ReportError(path, f"a part of a transaction this does not know: {_shown(line)}", number)
    return body


class _Party:
    def __init__(self, number: int, line: int):
        self.number, self.line = number, line
        self.trx_id = self.thread_id = ""
        self.statement: list[str] = []
        self.after_thread = False
        self.parts: dict[str, list[_Lock]] = {}

    def header(self, line: str) -> None:
        if line.startswith("TRANSACTION ") and not self.trx_id:
            self.trx_id = line[len("TRANSACTION "):].split(",")[0].strip()
        elif " thread id " in line and not self.after_thread:
            self.thread_id = line.split(" thread id ", 1)[1].split(",")[0].strip()
            self.after_thread = True
        elif self.after_thread:
            self.statement.append(line)


class _Lock:
    def __init__(self, line: str, path: str, number: int):
        self.line, self.number = line, number
        self.records: list[Record] = []
        self._fields: list[Field] | None = None
        self._head: tuple[bool, str] = (False, "")
        if line.startswith("TABLE LOCK "):
            self.database, self.table = _table(line, "TABLE LOCK table ", path, number)
            self.index, self.place = "", ()
        else:
            self.database, self.table = _table(line, " of table ", path, number)
            self.index = _between(line, " index ", " of table ").strip("`")
            self.place = (_between(line, "space id ", " "), _between(line, "page no ", " "))
        self.trx_id = _between(line, " trx id ", " ")
        flags = line.split(" trx id ", 1)[-1]
        mode_at = max(flags.find("lock_mode "), flags.find("lock mode "))
        if mode_at < 0:
            raise ReportError(path, f"a lock without its mode: {_shown(line)}", number)
        words = flags[mode_at + len("lock_mode "):]
        self.mode = words.split(" ", 1)[0]
        self.flags = words[len(self.mode):]

    def body(self, line: str, path: str, number: int) -> None:
        if line.startswith("Record lock, heap no "):
            self._close()
            self._fields = []
            self._head = (False, line.split()[4])
        elif self._fields is not None and line.lstrip()[:1].isdigit() and ": " in line:
            self._fields.append(_field(line, path, number))
        elif line.strip() == "" and self._fields is not None:
            self._close()

    def _close(self) -> None:
        if self._fields is None:
            return
        fields = tuple(self._fields)
        supremum = len(fields) == 1 and fields[0].data == bytes.fromhex(SUPREMUM_HEX) and self._head[1] == "1"
        self.records.append(Record(supremum, () if supremum else fields, heap_no=self._head[1]))
        self._fields = None

    def locks(self) -> list[ReportLock]:
        """One ReportLock per record it covers (a MySQL HOLDS list names several), or the table's."""
        self._close()
        if not self.index:
            return [ReportLock(self.table, "", self.mode, WHOLE_TABLE, None, self.trx_id, (), self.database)]
        return [
            ReportLock(self.table, self.index, self.mode, _kind(self.flags, r.supremum), r, self.trx_id,
                       self.place + (r.heap_no,), self.database)
            for r in self.records or [Record()]
        ]


def _kind(flags: str, supremum: bool) -> str:
    """The words after a lock's mode, in engine/types.py's words."""
    for words, kind in (("insert intention", INSERT_INTENTION_ONLY), ("locks gap before rec", GAP_ONLY),
                        ("locks rec but not gap", RECORD)):
        if words in flags:
            return kind
    return GAP_ONLY if supremum else NEXT_KEY  # nothing but the gap lies before the supremum


def _field(line: str, path: str, number: int) -> Field:
    """' 0: len 4; hex 80000001; asc     ;;' or ' 1: SQL NULL;'; the asc part is never read."""
    rest = line.split(":", 1)[1].strip()
    if rest.startswith("SQL NULL"):
        return Field(None)
    parts = rest.split(";")
    if len(parts) < 2 or not parts[0].startswith("len ") or not parts[1].strip().startswith("hex "):
        raise ReportError(path, f"a record field this cannot read: {_shown(line)}", number)
    length = parts[0][4:].strip()
    hexed = parts[1].strip()[4:].split(" ")[0].split("(")[0]
    try:
        data = bytes.fromhex(hexed)
    except ValueError:
        raise ReportError(path, f"a record field whose hex is not hex: {_shown(line)}", number) from None
    return Field(data, not length.isdigit() or int(length) > len(data))


def _table(line: str, before: str, path: str, number: int) -> tuple[str, str]:
    name = line.split(before, 1)[1] if before in line else ""
    if not name.startswith("`") or "`.`" not in name:
        raise ReportError(path, f"a lock without its table: {_shown(line)}", number)
    database, rest = name[1:].split("`.`", 1)
    return database, rest.split("`", 1)[0]


def _between(line: str, before: str, after: str) -> str:
    if before not in line:
        return ""
    rest = line.split(before, 1)[1]
    return rest.split(after, 1)[0] if after in rest else rest


def _shown(line: str) -> str:
    return repr(line[:120] + ("…" if len(line) > 120 else ""))


def _report(path: str, raw: list[_Party], victim: int | None, ended: bool, start: int) -> DeadlockReport:
    if not raw:
        raise ReportError(path, "no deadlock in it: expected InnoDB's LATEST DETECTED DEADLOCK section, "
                          "with '*** (1) TRANSACTION:' under it")
    if not ended:
        raise ReportError(path, f"the deadlock section is cut short after transaction ({raw[-1].number}): "
                          "it has no '*** WE ROLL BACK TRANSACTION (N)' line, so the victim is not known", start + 1)
    if len(raw) < 2:
        raise ReportError(path, "the deadlock section names one transaction: a cycle has two or more; it is cut short or edited")
    form = _form(path, raw)
    for party in raw:
        if not (party.trx_id.isdigit() and party.thread_id.isdigit()):
            raise ReportError(path, f"transaction ({party.number})'s id or thread id is not a number: the section is edited",
                              party.line)
        if not party.trx_id or not party.thread_id or WAITING not in party.parts:
            missing = "its TRANSACTION line" if not party.trx_id else "its thread id line" if not party.thread_id \
                else "the lock it waited for (WAITING FOR THIS LOCK TO BE GRANTED)"
            raise ReportError(path, f"transaction ({party.number}) lacks {missing}: the section is cut short or edited", party.line)
    if victim not in {p.number for p in raw}:
        raise ReportError(path, f"the victim ({victim}) is none of the report's transactions")
    return DeadlockReport(ENGINE, form, _linked(raw), victim, innodb=True)


def _form(path: str, raw: list[_Party]) -> str:
    if all(CONFLICTING in p.parts for p in raw):
        return MARIADB
    if all(HOLDS in p.parts for p in raw):
        return MYSQL
    raise ReportError(path, "a deadlock report of an InnoDB version this does not read: it knows MariaDB 10.6+ "
                      "(a 'CONFLICTING WITH:' list under each transaction) and MySQL 8.0/8.4 ('HOLDS THE LOCK(S):' "
                      "under each); MySQL 5.7, MySQL 8.0 before 8.0.18 and MariaDB before 10.6 print what only one "
                      "transaction holds")


def _linked(raw: list[_Party]) -> tuple[ReportParty, ...]:
    """Each party's wait, who holds what it waits for, and that holder's lock."""
    by_trx = {p.trx_id: p for p in raw}
    waits = {p.number: p.parts[WAITING][0].locks()[0] for p in raw}
    holder: dict[int, int] = {}
    held: dict[int, ReportLock] = {}
    for i, party in enumerate(raw):
        wanted = waits[party.number]
        found = _conflicting(party, wanted, by_trx) or _holding(party, wanted, raw)
        if found is None:  # both servers print a cycle in its order: each waits for the next
            found = (raw[(i + 1) % len(raw)], None)
        other, lock = found
        holder[party.number] = other.number
        if lock is not None:
            held.setdefault(other.number, lock)
    return tuple(
        ReportParty(p.number, p.trx_id, p.thread_id, "\n".join(p.statement).strip(), waits[p.number],
                    held.get(p.number), holder.get(p.number))
        for p in raw
    )


def _conflicting(party: _Party, wanted: ReportLock, by_trx: dict) -> tuple[_Party, ReportLock] | None:
    """MariaDB: the first lock in the way that another transaction of the cycle holds, on
    the record waited for where its lock covers several of the page's records."""
    for entry in party.parts.get(CONFLICTING, []):
        locks = entry.locks()
        if not locks or locks[0].trx_id == party.trx_id or locks[0].trx_id not in by_trx or "waiting" in entry.flags:
            continue
        same = [lock for lock in locks if lock.place == wanted.place]
        return by_trx[locks[0].trx_id], (same or locks)[0]
    return None


def _holding(party: _Party, wanted: ReportLock, raw: list[_Party]) -> tuple[_Party, ReportLock] | None:
    """MySQL: the lock another transaction holds on the record (or table) this one waits for."""
    for other in raw:
        if other is party:
            continue
        for entry in other.parts.get(HOLDS, []):
            for lock in entry.locks():
                if (lock.table, lock.index, lock.place) == (wanted.table, wanted.index, wanted.place):
                    return other, lock
    return None
