"""--show-locks: each statement's locked index records against the rows it returned."""

from __future__ import annotations

import json

from jobqueue_demo import api as core
from jobqueue_demo.run import events as ev

from conftest import cli, dsn_of


def _taken(server) -> dict[int, ev.LocksTaken]:
    report = core.run(core.load("filesort-locks"), server, 10.0, show_locks=True)
    assert not report.mismatches
    return {e.index: e for e in report.events if isinstance(e, ev.LocksTaken)}


def test_a_sorting_claim_locks_every_queued_job_it_sorts(server):
    taken = _taken(server)
    claim_a, claim_b, indexed_a = 3, 5, 13  # step indexes of the claims in filesort-locks.yaml
    # Three queued jobs, each through the state index and the primary key: six records for one row.
    assert (taken[claim_a].returned, taken[claim_a].locked) == (1, 6)
    assert taken[claim_b].returned == 0 and taken[claim_b].locked > 0
    # With an index in the claim's order, one entry and its row.
    assert (taken[indexed_a].returned, taken[indexed_a].locked) == (1, 2)
    # BEGIN, ROLLBACK and EXPLAIN lock nothing, so they are not reported.
    assert set(taken) <= {claim_a, claim_b, indexed_a, 15}


def test_without_the_option_nothing_is_counted(embedded):
    report = core.run(core.load("filesort-locks"), embedded, 10.0)
    assert not any(isinstance(e, ev.LocksTaken) for e in report.events)


def test_show_locks_in_the_transcript_and_json(embedded, tmp_path):
    text = cli("run", "filesort-locks", "--show-locks", "--dsn", dsn_of(embedded), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "-- A returned 1 row, locked 6 index records (its transaction holds 6)" in text.stdout
    assert "-- B returned 0 rows, locked" in text.stdout
    lines = cli("run", "filesort-locks", "--show-locks", "--format", "json", "--dsn", dsn_of(embedded), cwd=tmp_path)
    records = [json.loads(line) for line in lines.stdout.splitlines()]
    first = next(r for r in records if r["event"] == "locks_taken")
    assert first == {"event": "locks_taken", "step": 4, "session": "A", "returned": 1, "read": True, "locked": 6, "held": 6}
