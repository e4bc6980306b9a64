"""The reference docs name everything the loader and the CLI accept."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from jobqueue_demo.engine.mysql import errors as mysql_errors
from jobqueue_demo.engine.postgresql import errors as pg_errors
from jobqueue_demo.engine.seam import ENGINE_NAMES as ENGINES
from jobqueue_demo.scenario import loader
from jobqueue_demo.scenario.fault_kinds import STEP_FAULTS
from jobqueue_demo.scenario.model import INVARIANT_HOLDS, ISOLATION_LEVELS

ROOT = Path(__file__).resolve().parent.parent
FORMAT = (ROOT / "docs" / "scenario-format.md").read_text()
README = (ROOT / "README.md").read_text()

ACCEPTED = sorted(
    loader.TOP_KEYS
    | loader.STATEMENT_KEYS
    | loader.SESSION_KEYS
    | loader.EXPECT_KEYS
    | set(loader.STEP_WORDS)
    | set(STEP_FAULTS)
    | set(INVARIANT_HOLDS)
    | set(ISOLATION_LEVELS)
    | set(mysql_errors.CLASSES)
    | set(pg_errors.CLASSES)
    | set(ENGINES)
    | {"holds", "name", "sql"}
)


@pytest.mark.parametrize("word", ACCEPTED)
def test_scenario_format_names_every_accepted_word(word):
    assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", FORMAT), f"docs/scenario-format.md never mentions {word!r}"


def _commands() -> list[str]:
    from jobqueue_demo.cli.main import all_commands

    return sorted(c.name or c.callback.__name__ for c in all_commands().registered_commands)


@pytest.mark.parametrize("command", _commands())
def test_readme_shows_every_command(command):
    assert f"jobqueue-demo {command}" in README, f"README.md never shows 'jobqueue-demo {command}'"


def make_dry_run(target: str) -> str:
    """What `make TARGET` would run, run by none of it: a test must not run the suite inside it."""
    done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("target", sorted(set(re.findall(r"^make ([\w-]+)", README, re.MULTILINE))))
def test_every_make_command_in_the_readme_is_a_target(target):
    make_dry_run(target)


def test_make_test_fast_installs_no_server_and_runs_the_fast_subset():
    commands = make_dry_run("test-fast")
    assert "ruff check jobqueue_demo tests bench" in commands and "pytest -q -m fast" in commands, commands
    assert not {"mariadb-server", "galera-4", "mariadb-test", "postgresql", "tmux"} & set(re.findall(r"[\w-]+", commands)), commands
