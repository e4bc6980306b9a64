"""Every command documents itself with an example, and the exit codes are in the help."""

from __future__ import annotations

import pytest

from conftest import cli
from jobqueue_demo.cli.main import app


def command_names() -> list[str]:
    return sorted(c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands)


def test_top_level_help_lists_exit_codes():
    done = cli("--help")
    assert done.returncode == 0
    for code in ("0 ok", "1 expectations not met", "2 bad", "3 server", "130 interrupted"):
        assert code in done.stdout
    for name in command_names():
        assert name in done.stdout


@pytest.mark.parametrize("name", command_names())
def test_every_command_has_help_with_an_example(name):
    done = cli(name, "--help")
    assert done.returncode == 0, done.stderr
    assert "Example:" in done.stdout
    assert f"jobqueue-demo {name}" in done.stdout.split("Example:", 1)[1]


def test_unknown_command_is_a_usage_error():
    done = cli("frobnicate")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
