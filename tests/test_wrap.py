"""The one wrapping every view uses (render/wrap.py): words whole, continuation indented,
narration reflowed, our own tables cut or wrapped to fit."""

from __future__ import annotations

import pytest

from jobqueue_demo.render.transcript import NARRATION, NOTE, RESULT, SQL, Line, fit
from jobqueue_demo.render.table import format_table
from jobqueue_demo.render.wrap import cells, fitted_table, reflow, wrap

PROSE = "Node 3 serves reads. With wsrep_sync_wait = 1 a read there first waits until node 3\nhas applied everything.\n\nA second paragraph."


@pytest.mark.parametrize("width", [20, 60, 80, 120])
def test_narration_is_reflowed_into_paragraphs(width):
    lines = reflow(PROSE, width)
    assert max(cells(line) for line in lines) <= width
    paragraphs = "\n".join(lines).split("\n\n")
    assert [" ".join(p.split()) for p in paragraphs] == [
        "Node 3 serves reads. With wsrep_sync_wait = 1 a read there first waits until node 3 has applied everything.",
        "A second paragraph.",
    ]


def test_a_word_is_cut_only_when_it_alone_is_wider_than_the_line():
    assert wrap("-- on MariaDB (root@localhost?unix_socket=/tmp/x/mysqld.sock)", 20, "   ") == [
        "-- on MariaDB", "   (root@localhost?u", "   nix_socket=/tmp/x", "   /mysqld.sock)",
    ]
    assert wrap("try restarting transaction", 20, "   ") == ["try restarting", "   transaction"]


def test_a_statement_keeps_its_comment_beside_it_or_puts_it_below():
    line = Line("ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED; -- job 1 is claimed — skipped without waiting", "B", SQL,
                comment_at=len("ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;"))
    assert fit(line, 120) == [line.text]
    assert fit(line, 80) == ["ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;", "   -- job 1 is claimed — skipped without waiting"]
    assert fit(line, None) == [line.text]


def test_errors_and_notes_wrap_but_result_rows_stay_as_psql_prints_them():
    error = Line("ERROR 1213 (40001): Deadlock found when trying to get lock; try restarting transaction", "B", RESULT)
    assert fit(error, 60) == ["ERROR 1213 (40001): Deadlock found when trying to get lock;", "   try restarting transaction"]
    pg = Line("ERROR:  current transaction is aborted, commands ignored until end of transaction block", "B", RESULT)
    assert all(cells(p) <= 40 for p in fit(pg, 40))
    row = Line("  1 | " + "x" * 100, "A", RESULT)
    assert fit(row, 60) == [row.text]
    note = Line("-- A was chosen as the deadlock victim: its whole transaction was rolled back", "A", NOTE)
    assert fit(note, 40)[1].startswith("   ") and all(cells(p) <= 40 for p in fit(note, 40))
    assert fit(Line(PROSE, None, NARRATION), 200)[0].endswith("node 3 has applied everything.")


COLUMNS = ("isolation", "strategy", "workers", "jobs/s", "of ceiling", "claim p50 ms", "claim p99 ms", "deadlocks")
ROWS = [("repeatable-read", "skip-locked", "8", "1234", "98%", "1.23", "12.34", "0"),
        ("read-committed", "lease-heartbeat", "16", "123", "8%", "1.23", "112.34", "10")]


@pytest.mark.parametrize("width", [60, 80, 100])  # whole, it takes 109
def test_our_table_is_cut_into_tables_that_keep_the_key_columns(width):
    text = fitted_table(COLUMNS, (False, False) + (True,) * 6, ROWS, width, keys=3)
    tables = text.split("\n\n")
    assert len(tables) > 1 and max(cells(line) for line in text.split("\n")) <= width
    assert all(t.split("\n")[0].split("|")[:3] == tables[0].split("\n")[0].split("|")[:3] for t in tables)
    for column in COLUMNS[3:]:
        assert sum(f" {column}" in t.split("\n")[0] for t in tables) == 1
    # In a file or a pipe (no width) the table is psql's, whatever its width.
    assert fitted_table(COLUMNS, (False, False) + (True,) * 6, ROWS, None) == format_table(COLUMNS, (False, False) + (True,) * 6, ROWS)


def test_a_table_whose_key_columns_alone_are_too_wide_is_shown_expanded():
    text = fitted_table(COLUMNS, (False, False) + (True,) * 6, ROWS, 40, keys=3)
    assert text.startswith("-[ RECORD 1 ]") and "claim p99 ms | 112.34" in text
    assert max(cells(line) for line in text.split("\n")) <= 40


def test_a_long_value_wraps_in_its_cell_at_spaces_never_inside_a_word():
    rows = [("P1 line 54: INSERT INTO jobs (task) VALUES ('send pa", "1 affected", "waited, 1 affected")]
    text = fitted_table(("step", "[1]", "[2]"), (False,) * 3, rows, 60)
    assert "\n\n" not in text and max(cells(line) for line in text.split("\n")) <= 60
    assert " ".join(text.split()).count("INSERT INTO jobs (task)") == 0  # it did wrap
    words = {w for value in rows[0] for w in value.split()}
    pieces = {p.strip("+") for line in text.split("\n")[2:-1] for cell in line.split("|") for p in cell.split()}
    assert pieces - {""} <= words
