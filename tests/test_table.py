"""format_table against golden output captured from real psql.

Every expected string below was printed by ``psql -X`` (PostgreSQL 15.20,
default ``\\pset``: aligned, border 1, linestyle ascii, null '') for the query
noted beside it, and checked byte for byte with ``| cat -A``; psql's blank line
after the footer is not part of format_table's output. Numeric columns are
int columns, text columns text. Trailing spaces matter: each line is
written as its own literal so they stay visible.
"""

from __future__ import annotations

import pytest

from jobqueue_demo.render.table import display_width, format_table


def lines(*rows: str) -> str:
    return "\n".join(rows)


def test_lesson_numbers_and_text() -> None:
    # select 1 as id, 'send welcome email' as task
    assert format_table(("id", "task"), (True, False), (("1", "send welcome email"),)) == lines(
        " id |        task        ",
        "----+--------------------",
        "  1 | send welcome email",
        "(1 row)",
    )


def test_lesson_two_rows_plural_footer() -> None:
    # select * from (values (1,'done'),(2,'done')) t(id,state)
    assert format_table(("id", "state"), (True, False), (("1", "done"), ("2", "done"))) == lines(
        " id | state ",
        "----+-------",
        "  1 | done",
        "  2 | done",
        "(2 rows)",
    )


def test_header_centring_even_and_odd_padding() -> None:
    # values (1, 'abcde', 'abcdefg') t(id, ab, abcd)
    # "ab" in 5 columns: 3 spaces, 1 left / 2 right; "abcd" in 7: 3 spaces, 1 / 2.
    # "id" over a 1-wide number: header is the width, no centring needed.
    assert format_table(
        ("id", "ab", "abcd"), (True, False, False), (("1", "abcde", "abcdefg"),)
    ) == lines(
        " id |  ab   |  abcd   ",
        "----+-------+---------",
        "  1 | abcde | abcdefg",
        "(1 row)",
    )


def test_header_centring_even_padding() -> None:
    # the lesson header: "task" in 18 columns pads 7 / 7 (plus the border spaces)
    out = format_table(("task",), (False,), (("send welcome email",),))
    assert out.split("\n")[0] == "        task        "


def test_nulls_are_blank_and_last_column_keeps_separator_space() -> None:
    # values (1, NULL, 'x'), (NULL, 'bob', NULL) t(id, owner, note)
    assert format_table(
        ("id", "owner", "note"), (True, False, False), (("1", None, "x"), (None, "bob", None))
    ) == lines(
        " id | owner | note ",
        "----+-------+------",
        "  1 |       | x",
        "    | bob   | ",
        "(2 rows)",
    )


def test_empty_string_looks_like_null() -> None:
    assert format_table(("id", "note"), (True, False), (("1", ""),)) == format_table(
        ("id", "note"), (True, False), (("1", None),)
    )


def test_empty_result() -> None:
    # select 1::int as id, ''::text as state where false
    assert format_table(("id", "state"), (True, False), ()) == lines(
        " id | state ",
        "----+-------",
        "(0 rows)",
    )


def test_multiline_value_in_middle_column() -> None:
    # values (1, E'line one\nsecond', 'done'), (2, 'x', 'queued') t(id, body, state)
    assert format_table(
        ("id", "body", "state"),
        (True, False, False),
        (("1", "line one\nsecond", "done"), ("2", "x", "queued")),
    ) == lines(
        " id |   body   | state  ",
        "----+----------+--------",
        "  1 | line one+| done",
        "    | second   | ",
        "  2 | x        | queued",
        "(2 rows)",
    )


def test_multiline_value_in_last_column_with_trailing_newline() -> None:
    # values (1, 'done', E'a\nbbb\n') t(id, state, body)
    assert format_table(
        ("id", "state", "body"), (True, False, False), (("1", "done", "a\nbbb\n"),)
    ) == lines(
        " id | state | body ",
        "----+-------+------",
        "  1 | done  | a   +",
        "    |       | bbb +",
        "    |       | ",
        "(1 row)",
    )


def test_multiline_values_of_different_heights() -> None:
    # values (E'a\nb\nc', E'1\n2', 'q') t(x, y, z)
    assert format_table(("x", "y", "z"), (False, False, False), (("a\nb\nc", "1\n2", "q"),)) == lines(
        " x | y | z ",
        "---+---+---",
        " a+| 1+| q",
        " b+| 2 | ",
        " c |   | ",
        "(1 row)",
    )


def test_multiline_header() -> None:
    # select 1 as "multi<newline>line", 'v' as w
    assert format_table(("multi\nline", "w"), (True, False), (("1", "v"),)) == lines(
        " multi+| w ",
        " line  |   ",
        "-------+---",
        "     1 | v",
        "(1 row)",
    )


def test_numeric_column_wider_than_header() -> None:
    # values (123456, 'a'), (-7, 'b'), (NULL, 'c') t(n, t)
    assert format_table(
        ("n", "t"), (True, False), (("123456", "a"), ("-7", "b"), (None, "c"))
    ) == lines(
        "   n    | t ",
        "--------+---",
        " 123456 | a",
        "     -7 | b",
        "        | c",
        "(3 rows)",
    )


def test_numeric_last_column_is_right_aligned_without_trailing_space() -> None:
    # values ('a', 1), ('b', 12345) t(t, n)
    assert format_table(("t", "n"), (False, True), (("a", "1"), ("b", "12345"))) == lines(
        " t |   n   ",
        "---+-------",
        " a |     1",
        " b | 12345",
        "(2 rows)",
    )


def test_unicode_width_wide_halfwidth_and_em_dash() -> None:
    # values ('日本語', 1, 'wait — done'), ('ｱ', 22, 'é') t(name, n, note)
    # CJK counts 2 columns; halfwidth katakana, the em dash and é count 1.
    assert format_table(
        ("name", "n", "note"),
        (False, True, False),
        (("日本語", "1", "wait — done"), ("ｱ", "22", "é")),
    ) == lines(
        "  name  | n  |    note     ",
        "--------+----+-------------",
        " 日本語 |  1 | wait — done",
        " ｱ      | 22 | é",
        "(2 rows)",
    )


def test_wide_header() -> None:
    # values ('ab', '1') t("名前", x)
    assert format_table(("名前", "x"), (False, False), (("ab", "1"),)) == lines(
        " 名前 | x ",
        "------+---",
        " ab   | 1",
        "(1 row)",
    )


def test_tabs_control_characters_and_combining_marks() -> None:
    # values (E'a\tb', E'x\ry', E'p\x01q', 'e' || U&'\0301' || 'z') t(tab, cr, ctl, comb)
    assert format_table(
        ("tab", "cr", "ctl", "comb"),
        (False, False, False, False),
        (("a\tb", "x\ry", "p\x01q", "e\u0301z"),),
    ) == lines(
        "    tab    |  cr  |  ctl   | comb ",
        "-----------+------+--------+------",
        " a       b | x\\ry | p\\x01q | e\u0301z",
        "(1 row)",
    )


def test_zero_columns() -> None:
    # select            /  select where false
    assert format_table((), (), ((),)) == lines("--", "(1 row)")
    assert format_table((), (), ()) == lines("--", "(0 rows)")


@pytest.mark.parametrize(
    ("text", "width"),
    [
        ("abc", 3),
        ("日本語", 6),
        ("—", 1),  # em dash: East Asian ambiguous, one column in psql
        ("\uff21", 2),  # fullwidth A
        ("\U0001f600", 2),  # emoji, East Asian wide
        ("e\u0301", 1),  # combining acute accent takes no column
        ("\u00ad", 1),  # soft hyphen (Cf): psql 15 counts it as 1
        ("\u200b", 1),  # zero width space (Cf): likewise 1 in psql 15
        ("\u0378", 1),  # unassigned: CPython says "F", psql 1
        ("\x85", 6),  # C1 control, shown as \u0085
        ("\x7f", 4),  # DEL, shown as \x7F
        ("ab\ncdef", 4),  # widest line
    ],
)
def test_display_width_matches_psql(text: str, width: int) -> None:
    # widths observed as padding in psql output
    assert display_width(text) == width


def test_no_trailing_newline() -> None:
    assert not format_table(("a",), (False,), (("x",),)).endswith("\n")


def test_row_with_wrong_number_of_values_is_rejected() -> None:
    with pytest.raises(ValueError):
        format_table(("a", "b"), (False, False), (("x",),))
