"""Every command documents itself with an example, and the exit codes are in the help."""

from __future__ import annotations

import re

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


def test_every_option_says_its_default_once_and_reads_as_one_sentence():
    """An option's help built from another's must not nest its text: `compare --dsn` once read
    "(Server to use: ... Default: ... started for this run.). Default: for each engine ..."."""
    import typer.main

    group = typer.main.get_command(all_commands())
    for name, command in group.commands.items():
        for param in command.params:
            text = getattr(param, "help", None) or ""
            assert text.count("Default:") + text.count("[default:") <= 1, f"{name} {param.opts}: {text}"
            assert ".)" not in text and "(Server to use" not in text, f"{name} {param.opts}: {text}"


@pytest.mark.parametrize("argv, expected", [
    (["run", "nowait", "--engine", "postgresql"], ["--engine", "postgresql", "run", "nowait"]),
    (["--debug", "show", "x", "--engine=postgresql", "--allow-shared-user"],
     ["--debug", "--engine=postgresql", "--allow-shared-user", "show", "x"]),
    (["--engine", "mysql", "run", "a.yaml", "--", "--debug"], ["--engine", "mysql", "run", "a.yaml", "--", "--debug"]),
    (["run", "nowait", "--engine"], ["run", "nowait", "--engine"]),
])
def test_global_options_after_the_command_are_moved_before_it(argv, expected):
    from jobqueue_demo.cli.main import hoisted

    assert hoisted(argv) == expected


def test_engine_after_the_command_is_the_global_engine(pg_local):
    from conftest import LOCAL_PG_DSN

    done = cli("run", "nowait", "--engine", "postgresql", env={"JOBQUEUE_DEMO_DSN": LOCAL_PG_DSN})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("-- NOWAIT") and "on PostgreSQL" in done.stdout.splitlines()[0]


@pytest.mark.parametrize("args", [("--engine", "oracle", "run", "nowait"), ("run", "nowait", "--engine", "oracle")])
def test_an_unknown_engine_is_one_line_wherever_it_stands(args):
    done = cli(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "jobqueue-demo: unknown engine 'oracle': expected mysql or postgresql\n"


@pytest.mark.parametrize("width", [60, 80, 120])
def test_every_help_fits_its_width_and_its_examples_still_paste(width, monkeypatch, capsys):
    """Click keeps an example block's lines as written: `bench --help` once printed a
    122-column command at any width. A long one is continued with ` \\` at an option."""
    from examples import help_blocks

    monkeypatch.setenv("COLUMNS", str(width))
    shown = {block.where: block.commands for block in help_blocks()}
    for name in [None, *command_names()]:
        args = [name, "--help"] if name else ["--help"]
        with pytest.raises(SystemExit):
            all_commands()(args=args, prog_name="jobqueue-demo")
        out = capsys.readouterr().out
        too_wide = [line for line in out.splitlines() if len(line) > width]
        assert not too_wide, f"{args} at {width} columns: {too_wide}"
        if name:
            pasted = out.split("Example:", 1)[1].replace(" \\\n", " ")
            for command in shown[f"{name} --help"]:
                assert " ".join(command.split()) in " ".join(pasted.split()), command


# The words of the option help a reader copies whole: the DSN templates.
WHOLE_WORDS = ("mysql://user:pass@host:port/db", "postgresql://user@host:port/db")


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_dsn_templates_are_never_split(width, monkeypatch, capsys):
    """At 60 columns the options' help column was 26 wide: click split a 30-character
    template across two lines (`mysql://u` / `ser:pass@host:port/db`)."""
    monkeypatch.setenv("COLUMNS", str(width))
    for name in command_names():
        with pytest.raises(SystemExit):
            all_commands()(args=[name, "--help"], prog_name="jobqueue-demo")
        out = capsys.readouterr().out
        joined = re.sub(r"\n\s*", "", out)  # the help with its line breaks taken out
        for word in WHOLE_WORDS:
            if word in joined:
                assert word in out, f"{name} --help at {width} columns splits {word}"
