"""The small things a polished CLI has: --version, show, lessons in teaching order, export
formats by suffix, record guarding shipped lessons, the page's verification date."""

from __future__ import annotations

import datetime
import json
import re
import tomllib

from conftest import ROOT, cli, dsn_env, run_cli
from jobqueue_demo import __version__
from jobqueue_demo import api as core

UNREACHABLE = ["--dsn", "mysql://root@127.0.0.1:1/test"]  # exit 2, not 3, proves nothing connected


def test_version_matches_the_package_metadata():
    done = cli("--version")
    assert done.returncode == 0 and done.stdout == f"jobqueue-demo {__version__}\n"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["version"] == __version__


def test_license_is_an_spdx_string_for_setuptools_77():
    """A license table makes setuptools print a deprecation warning in `make demo`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert "setuptools>=77" in project["build-system"]["requires"]


def test_show_gives_a_lesson_at_a_glance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = run_cli("show", "nowait")
    assert done.exit_code == 0, done.stderr
    scenario = core.load("nowait")
    out = done.stdout
    assert out.startswith(scenario.title + "\n") and scenario.summary in out
    assert "sessions: A, B" in out and "what it proves:\n  NOWAIT turns a wait into an error" in out
    assert re.search(r"expected outcome on mysql:\n  step 5, B> SELECT .* -> error lock-not-available", out)
    assert "explore variant: none" in out and f"verified: {scenario.verified}" in out
    seed = run_cli("show", "skip-locked").stdout
    assert "explore variant: skip-locked-explore (jobqueue-demo explore skip-locked-explore)" in seed
    assert "-> without waiting, columns [id, task], rows [[2, generate invoice]]" in seed
    # The outcome differs by engine: it once showed MariaDB's victim under --engine postgresql.
    pg = run_cli("--engine", "postgresql", "show", "deadlock").stdout
    assert re.search(r"expected outcome on postgresql:\n  step 7, A> UPDATE .* -> waits for a lock, then error deadlock\n", pg)
    variant = run_cli("show", "skip-locked-explore").stdout
    assert "explore variant of: skip-locked" in variant and "invariants: no job done twice;" in variant


def test_show_source_prints_the_yaml_as_shipped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = run_cli("show", "outbox", "--source")
    assert done.exit_code == 0 and done.stdout == (ROOT / "scenarios" / "outbox.yaml").read_text()


def teaching_order_in_docs() -> list[str]:
    table = (ROOT / "docs" / "lessons.md").read_text()
    names = []
    for cell in re.findall(r"^\| \d+ \|[^|]*\| ([^|]*) \|", table, re.MULTILINE):
        names += re.findall(r"`([\w-]+)`", cell)
    return names


def test_lessons_are_listed_in_teaching_order_with_explore_variants_marked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run_cli("lessons").stdout
    listed = [line.split()[0] for line in out.splitlines() if line and not line.startswith((" ", "--"))]
    order = teaching_order_in_docs()
    shipped = {p.stem for p in (ROOT / "scenarios").glob("*.yaml") if not p.stem.endswith("-explore")}
    assert set(order) == shipped and listed[: len(order)] == order
    head, explore_part = out.split("-- written for 'jobqueue-demo explore'")
    assert "claim-without-lock-explore" in explore_part and "skip-locked-explore" in explore_part
    assert "-explore " not in head
    assert "; explore: skip-locked-explore" in head
    assert "; explore variant of skip-locked" in explore_part


def test_export_format_follows_the_suffix(tmp_path, embedded):
    page = tmp_path / "nowait.json"
    done = cli("export", "nowait", "-o", str(page), env=dsn_env(embedded), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(page.read_text())
    assert data["title"] == core.load("nowait").title
    assert data["verified"].startswith(f"Verified against {embedded.label} on ")
    # Run on MariaDB only: PostgreSQL's stamp is the one the file records, beside this run's.
    postgres = dict(core.load("nowait").stamps)["postgresql"]
    assert data["verified"].endswith(f" · Verified against {postgres}")
    assert any("narration" in p for p in data["transcript"]) and any("lines" in p for p in data["transcript"])
    assert {"event"} <= set(data["events"][0]) and data["source"] == (ROOT / "scenarios" / "nowait.yaml").read_text()
    markdown = tmp_path / "nowait.md"
    assert cli("export", "nowait", "-o", str(markdown), env=dsn_env(embedded), cwd=tmp_path).returncode == 0
    assert markdown.read_text().startswith("# ")


def test_export_refuses_an_unknown_suffix_in_one_line(tmp_path):
    for args, words in (
        (["-o", "page.txt"], "page.txt: the page's format follows the suffix; use .html, .md or .json"),
        (["-o", "page.md", "--format", "html"], "page.md: the suffix says md, --format says html; make them agree"),
    ):
        done = cli("export", "nowait", *args, *UNREACHABLE, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr == f"jobqueue-demo: {words}\n"
        assert list(tmp_path.iterdir()) == []


def test_record_never_rewrites_a_shipped_lesson_unless_asked(tmp_path, embedded):
    shipped = ROOT / "scenarios" / "nowait.yaml"
    before = shipped.read_text()
    done = cli("record", "nowait", *UNREACHABLE, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "jobqueue-demo: nowait is a lesson shipped with jobqueue-demo; record a copy "
        "(jobqueue-demo show nowait --source > my-nowait.yaml), or pass --in-place to rewrite it"
    )
    assert cli("record", str(shipped), *UNREACHABLE, cwd=tmp_path).returncode == 2
    assert shipped.read_text() == before
    copy = tmp_path / "my-nowait.yaml"
    copy.write_text(before)
    done = cli("record", str(copy), env=dsn_env(embedded), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    recorded = copy.read_text()
    assert f"\n  mysql: {embedded.label} on {datetime.date.today().isoformat()}\n" in recorded
    assert recorded.endswith(before[before.index("  postgresql: PostgreSQL "):])  # the other engine's stamp kept


class _Midnight(datetime.date):
    """today() is the run's day the first time it is asked, the next day after."""

    calls = 0

    @classmethod
    def today(cls):
        cls.calls += 1
        return datetime.date(2030, 1, 1) if cls.calls == 1 else datetime.date(2030, 1, 2)


def test_the_page_is_dated_by_its_verification_run(embedded, monkeypatch):
    monkeypatch.setattr(core.datetime, "date", _Midnight)
    page = core.lesson_page(core.load("nowait"), embedded, 10.0, "md")
    assert f"Verified against {embedded.label} on 2030-01-01" in page and "2030-01-02" not in page
