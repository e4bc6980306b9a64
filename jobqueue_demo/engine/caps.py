"""How much of a result the tool keeps: scenario SQL is anyone's, and a transcript, an
expectation or a lesson page has no use for more than a reader can look at.

Both engines read a result a row at a time and hand each row to `Kept`: the first
MAX_ROWS_KEPT rows are kept while they fit in MAX_RESULT_BYTES, each value cut to
MAX_VALUE_BYTES; the rest are read (so the connection stays usable) and counted, not kept.
A row too big to read is not read to its end: the session's connection is dropped.
"""

from __future__ import annotations

from .types import CUT_MARK

MAX_ROWS_KEPT = 1000
MAX_VALUE_BYTES = 4 * 1024
MAX_RESULT_BYTES = 2 * 1024 * 1024
# A statement's notices (PostgreSQL's RAISE NOTICE, in a loop if it likes): the first ones
# are kept, each cut like a value, the rest counted.
MAX_NOTICES = 100
# What one row may take while it is read: the client library holds a row whole, so this
# bounds the memory a result takes. MySQL's client library counts it (max_allowed_packet).
MAX_ROW_BYTES = 16 * 1024 * 1024
# libpq does not: what reading an answer may grow the process by. A row of MAX_ROW_BYTES
# takes up to three times its size there (libpq's buffer, libpq's copy of the row, the value
# handed over), and the rows kept up to MAX_RESULT_BYTES take some more.
MAX_ANSWER_GROWTH = 4 * MAX_ROW_BYTES


def size_text(n: int) -> str:
    """4 KiB, 2 MiB: how the caps are named in transcripts and messages."""
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


ROW_TOO_BIG = f"a row of more than {size_text(MAX_ROW_BYTES)}, the most jobqueue-demo reads"
ROW_TOO_BIG_TO_READ = f"a row too big to read: the answer took more than {size_text(MAX_ANSWER_GROWTH)} of memory, the most jobqueue-demo gives one"
# The same bound on an answer libpq holds whole, its notices included (a spec's step).
ANSWER_TOO_BIG_TO_READ = f"an answer too big to read: it took more than {size_text(MAX_ANSWER_GROWTH)} of memory, the most jobqueue-demo gives one"


class Kept:
    """One result set's rows as they arrive: kept, cut or counted."""

    def __init__(self, text, spent: int = 0, whole: bool = False):
        self.text = text  # the engine's bytes -> text (None for NULL)
        # Every row and value kept as it came: for an answer libpq already holds whole (its
        # growth bounded while it is read), printed whole as isolationtester prints it.
        self.whole = whole
        self.rows: list[tuple[str | None, ...]] = []
        # What the results before this one in the same step kept: a step of many statements
        # keeps MAX_RESULT_BYTES in all, not in each.
        self.bytes = spent
        self.omitted = 0
        self.cut = 0
        self.capped = False

    @property
    def total(self) -> int:
        return len(self.rows) + self.omitted

    @property
    def full(self) -> bool:
        """No later row will be kept: each is only counted (`omitted += 1`)."""
        return bool(self.omitted) or (len(self.rows) >= MAX_ROWS_KEPT and not self.whole)

    def add(self, values) -> None:
        if self.whole:
            self.rows.append(tuple(None if v is None else self.text(v) for v in values))
            return
        if self.full:
            self.omitted += 1
            return
        row = tuple(self._value(v) for v in values)
        size = sum(len(v) for v in row if v is not None)
        if self.bytes + size > MAX_RESULT_BYTES:
            self.omitted += 1
            self.capped = True
            return
        self.rows.append(row)
        self.bytes += size

    def _value(self, value) -> str | None:
        if value is None:
            return None
        if isinstance(value, str) and value.isascii():  # no copy of a long text to count its bytes
            if len(value) <= MAX_VALUE_BYTES:
                return value
            self.cut += 1
            return value[:MAX_VALUE_BYTES] + CUT_MARK.format(len(value) - MAX_VALUE_BYTES)
        raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
        if len(raw) <= MAX_VALUE_BYTES:
            return self.text(raw)
        self.cut += 1
        head = _whole_characters(raw[:MAX_VALUE_BYTES])
        return self.text(head) + CUT_MARK.format(len(raw) - len(head))


def cut_text(text: str) -> str:
    """Server text (an error's message, a notice) cut to MAX_VALUE_BYTES as a value is:
    RAISE EXCEPTION '%', repeat('x', 8000000) is anyone's."""
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) <= MAX_VALUE_BYTES:
        return text
    head = _whole_characters(raw[:MAX_VALUE_BYTES])
    return head.decode("utf-8", "replace") + CUT_MARK.format(len(raw) - len(head))


class Notices:
    """One statement's notices as they arrive: the first MAX_NOTICES kept, each cut, the rest
    only counted. `show` makes a kept one's text."""

    def __init__(self, show=str):
        self.show = show
        self.most: int | None = MAX_NOTICES  # None: every notice kept
        self.kept: list[str] = []
        self.more = 0

    def add(self, notice) -> None:
        if self.most is None or len(self.kept) < self.most:
            self.kept.append(self.show(notice))
        else:
            self.more += 1

    def take(self) -> tuple[tuple[str, ...], int]:
        """The notices so far, as lines, and how many there were; the next statement starts afresh."""
        lines = tuple(self.kept)
        if self.more:
            lines += (f"-- {self.more} more notices not shown: jobqueue-demo keeps {MAX_NOTICES} a statement",)
        count = len(self.kept) + self.more
        self.clear()
        return lines, count

    def clear(self) -> None:
        self.kept, self.more = [], 0


def _whole_characters(head: bytes) -> bytes:
    """`head` without a UTF-8 character the cut split in two (at most 3 bytes of it)."""
    for end in range(len(head), len(head) - 4, -1):
        try:
            head[:end].decode("utf-8")
            return head[:end]
        except UnicodeDecodeError:
            continue
    return head  # not UTF-8 at all: the engine shows it its own way (MySQL: hex)
