"""The lessons on PostgreSQL: every lesson written for it verifies on the embedded PostgreSQL
(and the local cluster when it answers), a lesson written for MariaDB/MySQL alone is refused
there in one line, `compare` sets the two engines side by side, `export --engines` puts both
transcripts on one page, and `record` on PostgreSQL writes its own slot and stamp."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import LOCAL_PG_DSN, ROOT, cli, local_pg_reachable, run_cli
from jobqueue_demo import api as core
from jobqueue_demo.render.columns import cells
from test_postgres_engine import MISSING

pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"no PostgreSQL server binaries: {MISSING}")

LESSONS = sorted((ROOT / "scenarios").glob("*.yaml"))
BOTH = [p for p in LESSONS if "postgresql" in core.load(str(p)).engines]


def test_the_lessons_are_split_as_docs_lessons_md_says():
    table = (ROOT / "docs" / "lessons.md").read_text().split("## PostgreSQL", 1)[1].split("\n## ", 1)[0]
    said = {}
    for names, engines in re.findall(r"^\| (`[^|]*`) \| ([^|]*) \|", table, re.MULTILINE):
        for name in re.findall(r"`([\w-]+)`", names):
            said[name] = tuple(e.strip() for e in engines.split(","))
    teaching = [p for p in LESSONS if not p.stem.endswith("-explore")]
    assert said == {p.stem: core.load(str(p)).engines for p in teaching}


def test_verify_every_postgresql_lesson_on_the_embedded_postgresql():
    # All the files, as `verify scenarios/*.yaml` gives them: those for MariaDB/MySQL alone are
    # skipped, each said, and the rest verified.
    done = cli("--engine", "postgresql", "verify", *[str(p) for p in LESSONS], timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok (") == len(BOTH)
    skipped = [p for p in LESSONS if p not in BOTH]
    assert skipped and done.stdout.count(": skipped, written for mysql only") == len(skipped)
    assert "Verified against PostgreSQL" in done.stdout


@pytest.mark.skipif(not local_pg_reachable(), reason="no PostgreSQL on 127.0.0.1:5432")
def test_verify_every_postgresql_lesson_on_the_local_cluster():
    done = cli("verify", *[str(p) for p in BOTH], "--dsn", LOCAL_PG_DSN, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok (") == len(BOTH)


@pytest.mark.parametrize("path", BOTH, ids=lambda p: p.stem)
def test_each_postgresql_lesson_carries_both_stamps(path):
    stamps = dict(core.load(str(path)).stamps)
    assert stamps["mysql"].startswith("MariaDB ") and stamps["postgresql"].startswith("PostgreSQL ")


def test_a_lesson_for_mysql_alone_is_refused_on_postgresql_in_one_line():
    done = cli("--engine", "postgresql", "run", "supremum-wait")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "jobqueue-demo: supremum-wait: written for mysql only; engines: [mysql] (this server is postgresql)"
    ]
    assert done.stdout == ""


@pytest.mark.server  # run_cli starts both embedded servers
def test_compare_sets_the_engines_side_by_side_in_80_columns():
    done = run_cli("compare", "gap-locks")
    assert done.exit_code == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(cells(line) <= 80 for line in lines), max(lines, key=cells)
    assert re.match(r"  MariaDB \S+ +\| PostgreSQL \S+$", lines[1])
    # P's INSERT: waiting on MariaDB, answered at once on PostgreSQL, and marked.
    marked = [line for line in lines if line.startswith("* P> INSERT")]
    assert len(marked) == 1 and "|" in marked[0]
    # Its comment on both sides: the waiting side once left it out.
    assert any([c.strip() for c in line.split("|")] == ["-- a new job, id 4"] * 2 for line in lines)
    assert "* 1 statement(s) whose outcome differs:" in lines
    assert any(re.match(r"  step 4 \(line \d+\), P: waited vs not$", line) for line in lines)


@pytest.mark.server  # run_cli starts both embedded servers
def test_compare_wraps_a_long_title_too():
    """disconnect-worker's title line was 82 columns, the only line compare did not wrap."""
    done = run_cli("compare", "disconnect-worker")
    lines = done.stdout.splitlines()
    assert all(cells(line) <= 80 for line in lines), max(lines, key=cells)
    assert lines[:2] == ["-- A crashed worker's claim comes back once the server notices; its email does",
                         "   not"]


@pytest.mark.server  # run_cli starts both embedded servers
def test_compare_as_json_names_each_difference():
    done = run_cli("compare", "deadlock", "--format", "json")
    assert done.exit_code == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [e["engine"] for e in data["engines"]] == ["mysql", "postgresql"]
    assert all(e["expectations_met"] for e in data["engines"])
    found = {(d["session"], d["what"]) for d in data["differences"]}
    # MariaDB rolls B back at once; PostgreSQL, after deadlock_timeout, A, the first to wait.
    assert ("A", "not vs waited") not in found and ("B", "not vs waited") in found
    a = next(d for d in data["differences"] if d["session"] == "A")
    assert a["what"] == "rows vs error" or a["what"] == "ok vs error"
    on_mysql, on_pg = a["outcomes"]
    assert "40P01" in on_pg and "affected" in on_mysql


def test_compare_needs_a_lesson_for_both_engines_and_two_servers_or_none():
    done = cli("compare", "supremum-wait")
    assert done.returncode == 2 and "written for mysql only" in done.stderr and "nothing to compare" in done.stderr
    done = cli("compare", "gap-locks", "--dsn", "mysql://root@127.0.0.1:3306/test")
    assert done.returncode == 2 and "give --dsn twice" in done.stderr


@pytest.mark.server  # run_cli starts both embedded servers
def test_export_puts_both_transcripts_and_both_stamps_on_the_page():
    done = run_cli("export", "nowait", "--engines", "mysql,postgresql", "--format", "json")
    assert done.exit_code == 0, done.stdout + done.stderr
    page = json.loads(done.stdout)
    assert re.fullmatch(r"Verified against MariaDB \S+ on \S+ · Verified against PostgreSQL \S+ on \S+", page["verified"])
    assert [t["engine"] for t in page["transcripts"]] == ["mysql", "postgresql"]
    pg_lines = [line["text"] for p in page["transcripts"][1]["transcript"] for line in p.get("lines", ())]
    assert any(text.startswith("ERROR:  could not obtain lock on row") for text in pg_lines)
    assert "jobqueue-demo compare nowait" in page["run"]


def test_export_engines_refuses_an_engine_the_lesson_is_not_written_for():
    done = cli("export", "supremum-wait", "--engines", "mysql,postgresql", "--format", "md")
    assert done.returncode == 2 and "written for mysql only, not postgresql" in done.stderr


@pytest.mark.server  # run_cli starts both embedded servers
def test_record_on_postgresql_writes_its_own_slot_and_stamp(tmp_path):
    """A shared expectation PostgreSQL does not meet is split by engine, the MariaDB one kept;
    one it meets is left as written; the MariaDB stamp stays."""
    lesson = tmp_path / "nowait.yaml"
    shutil.copy(ROOT / "scenarios" / "nowait.yaml", lesson)
    text = lesson.read_text()
    per_engine = re.search(r"    expect:\n      mysql: \{columns.*\n      postgresql: .*\n", text).group(0)
    text = text.replace(per_engine, "    expect: {columns: [id, task], rows: [[2, generate invoice]]}\n")
    text = re.sub(r"verified:\n  mysql: (.*)\n  postgresql: .*\n", r"verified: \1\n", text)
    lesson.write_text(text)
    mysql_stamp = core.load(str(lesson)).verified
    done = run_cli("--engine", "postgresql", "record", str(lesson))
    assert done.exit_code == 0, done.stdout + done.stderr
    recorded = lesson.read_text()
    assert "    expect:\n      mysql: {columns: [id, task], rows: [[2, generate invoice]]}\n" \
           "      postgresql: {error: IN_FAILED_SQL_TRANSACTION}\n" in recorded
    assert "    expect:\n      error: lock-not-available\n" in recorded  # met on both: as written
    scenario = core.load(str(lesson))
    assert dict(scenario.stamps)["mysql"] == mysql_stamp
    assert dict(scenario.stamps)["postgresql"].startswith("PostgreSQL ")
    for engine in ("mysql", "postgresql"):
        again = run_cli("--engine", engine, "verify", str(lesson))
        assert again.exit_code == 0, again.stdout + again.stderr


def test_lessons_and_show_name_the_engines_and_every_stamp():
    listing = run_cli("lessons").stdout.splitlines()
    detail = listing[listing.index(next(line for line in listing if line.startswith("supremum-wait "))) + 1]
    assert "; engines mysql; verified: MariaDB " in detail
    card = run_cli("show", "nowait").stdout
    assert "engines: mysql, postgresql" in card
    assert re.search(r"^verified: MariaDB \S+ on \S+\nverified: PostgreSQL \S+ on \S+$", card, re.MULTILINE)


def test_a_postgresql_error_is_red_on_the_page_as_a_mysql_one_is(tmp_path, pg_local):
    from conftest import LOCAL_PG_DSN

    page = tmp_path / "nowait.html"
    done = cli("export", "nowait", "-o", str(page), "--engine", "postgresql", env={"JOBQUEUE_DEMO_DSN": LOCAL_PG_DSN})
    assert done.returncode == 0, done.stderr
    errors = re.findall(r'<span class="l (\w+)[^"]*">ERROR:  could not obtain lock', page.read_text())
    assert errors and set(errors) == {"error"}
