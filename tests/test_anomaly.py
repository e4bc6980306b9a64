"""explore names the anomaly its counterexample shows, and cuts the steps that change nothing."""

from __future__ import annotations

import json

from conftest import ROOT, cli, dsn_of
from jobqueue_demo import api as core
from jobqueue_demo.explore.search import ExploreOptions, explore

DATA = ROOT / "tests" / "data"


def _violation(server, name: str):
    report = explore(core.load(name), server, ExploreOptions(jobs=1))
    return next(f for f in report.findings if f.kind == "violated")


def test_the_broken_claim_is_named_a_double_claim_from_its_schedule(server):
    finding = _violation(server, "claim-without-lock-explore")
    moves = " ".join(map(str, finding.shortest.moves))
    assert moves == "A1 A2 A3 B1 B2 B3 B4 B5 A4 B6 B7" and finding.left_out == 0
    (told,) = finding.explanations
    assert told.anomaly.startswith("double claim")
    assert told.cause.startswith("B read claimed = 1 at B5, before A's commit at A4 (A had acted on it at A3); ")
    assert told.cause.endswith("and both committed (A at A4, B at B7).")


def test_an_overwrite_is_a_lost_update_and_the_read_after_it_is_left_out(server):
    finding = _violation(server, str(DATA / "lost-update-trailing.yaml"))
    # B's final SELECT changes nothing: the prefix without it fails with the same balance.
    assert [str(m) for m in finding.shortest.moves][-2:] == ["B3", "B4"] and finding.left_out == 1
    assert [c.got.rows for c in finding.shortest.checks] == [(("110",),)]
    (told,) = finding.explanations
    assert told.anomaly == "lost update"
    assert "B read balance = 100 at B2, before A's commit at A4; B's write at B3" in told.cause


def test_two_reads_with_a_commit_between_are_a_non_repeatable_read(embedded):
    # B's read, also autocommitted, changes nothing and is not what came between.
    finding = _violation(embedded, str(DATA / "non-repeatable.yaml"))
    (told,) = finding.explanations
    assert told.anomaly == "non-repeatable read"
    assert told.cause == (
        "A ran the same read at A2 and A3 in one transaction and got different rows; "
        "B's autocommitted statement at B2 came in between."
    )


def test_the_explanation_is_in_the_report_and_the_json(embedded, tmp_path):
    text = cli("explore", "claim-without-lock-explore", "--dsn", dsn_of(embedded), cwd=tmp_path)
    assert text.returncode == 1
    assert "\n== double claim (a lost update: two transactions took the same item): B read claimed = 1" in text.stdout
    report = json.loads(cli("explore", str(DATA / "lost-update-trailing.yaml"), "--json", "--dsn", dsn_of(embedded)).stdout)
    (finding,) = report["findings"]
    assert finding["left_out"] == 1 and finding["explanations"][0]["anomaly"] == "lost update"


def test_two_checks_then_two_writes_to_different_rows_are_a_write_skew(server):
    finding = _violation(server, str(DATA / "write-skew.yaml"))
    assert " ".join(map(str, finding.shortest.moves)) == "A1 A2 A3 B1 B2 A4 B3 B4"
    (told,) = finding.explanations
    assert told.anomaly == "write skew"
    assert told.cause.startswith(
        "A read on_call = 2 at A2 and B read on_call = 2 at B2, each before the other's commit; "
        "A's write at A3 and B's at B3 then changed different rows of doctors, a table the other had read"
    )
    assert told.cause.endswith("both committed (A at A4, B at B4): each acted on what the other's write made untrue.")


def test_a_read_uncommitted_sum_in_the_middle_of_a_transfer_is_a_dirty_read(server):
    finding = _violation(server, str(DATA / "dirty-read.yaml"))
    assert " ".join(map(str, finding.shortest.moves)) == "A1 A2 B1 A3 A4 B2"
    (told,) = finding.explanations
    assert told.anomaly == "dirty read"
    assert told.cause == (
        "B read total = 150 at B1 under READ UNCOMMITTED, after A's write at A2 and before A's next write at A3 "
        "and commit at A4: a state no committed transaction left."
    )


def test_the_same_transfer_read_committed_has_no_dirty_read(server, tmp_path):
    # The loader's isolation is the only difference: the dirty read is named from it, not guessed.
    text = (DATA / "dirty-read.yaml").read_text().replace("read-uncommitted", "read-committed")
    (tmp_path / "clean.yaml").write_text(text)
    report = explore(core.load(str(tmp_path / "clean.yaml")), server, ExploreOptions(jobs=1))
    assert report.counts["violated"] == 0 and not report.findings


def test_a_read_uncommitted_read_of_a_write_rolled_back_is_named_so(server, tmp_path):
    text = (DATA / "dirty-read.yaml").read_text()
    rolled_back = text.replace(
        "  - A: UPDATE accounts SET balance = balance + 50 WHERE id = 2;\n  - A: COMMIT;\n", "  - A: ROLLBACK;\n"
    )
    assert rolled_back != text
    (tmp_path / "rolled-back.yaml").write_text(rolled_back)
    finding = _violation(server, str(tmp_path / "rolled-back.yaml"))
    assert " ".join(map(str, finding.shortest.moves)) == "A1 A2 B1 A3 B2"
    (told,) = finding.explanations
    assert told.cause == (
        "B read total = 150 at B1 under READ UNCOMMITTED, after A's write at A2 and before A's rollback at A3: "
        "a value that was never committed."
    )


def test_two_checks_then_two_inserts_are_a_write_skew_not_a_double_claim(server):
    # Both INSERTs use the same captured 0 in their WHERE, but add different rows.
    finding = _violation(server, str(DATA / "write-skew-insert.yaml"))
    (told,) = finding.explanations
    assert told.anomaly == "write skew"
    assert "A's write at A3 and B's at B3 then added different rows to bookings, a table the other had read" in told.cause
