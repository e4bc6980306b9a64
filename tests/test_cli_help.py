"""Every command documents itself with an example, and the exit codes are in the help."""

from __future__ import annotations

import pytest

from conftest import cli
from jobqueue_demo.cli.main import all_commands


def command_names() -> list[str]:
    return sorted(c.name or c.callback.__name__.replace("_", "-") for c in all_commands().registered_commands)


@pytest.mark.parametrize("args", [("--help",), ("--help", "run")], ids=" ".join)
def test_top_level_help_lists_exit_codes(args):
    done = cli(*args)
    assert done.returncode == 0
    for code in ("0 ok", "1 expectations not met", "2 bad", "3 server", "4 standard output", "130 interrupted", "143 SIGTERM"):
        assert code in done.stdout
    commands = done.stdout.split("Commands:", 1)[1]
    for name in command_names():
        assert f"  {name} " in commands


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


def test_each_command_is_where_main_looks_for_it():
    """main.py imports only the module of the command asked for: its table must say where each is."""
    from jobqueue_demo.cli.main import COMMAND_MODULES

    for command in all_commands().registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        module = command.callback.__module__.rsplit(".", 1)[1]
        assert name in COMMAND_MODULES[module], f"{name} is registered by cli/{module}.py"
    listed = [name for names in COMMAND_MODULES.values() for name in names]
    assert sorted(listed) == command_names()
