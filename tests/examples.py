"""Every example command a user is shown: the README's fenced blocks and each command's
--help examples, and how to run one exactly as a user pastes it into a fresh shell.

Shared by tests/test_examples.py and bench/bench_slow_examples.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"^(?:\$ )?(jobqueue-demo(?: .*?)?)(?:\s+# .*)?$")  # a trailing comment is the reader's


@dataclass(frozen=True)
class Block:
    """Commands shown together, run in order in one directory, as a user pastes them."""

    where: str  # "README.md block 3" or "run --help"
    commands: tuple[str, ...]


def readme_blocks(path: Path = ROOT / "README.md") -> list[Block]:
    out = []
    for number, match in enumerate(FENCE.finditer(path.read_text()), 1):
        commands = tuple(m.group(1).strip() for line in match.group(1).splitlines() if (m := COMMAND.match(line.strip())))
        if commands:
            out.append(Block(f"{path.name} block {number}", commands))
    return out


def help_blocks() -> list[Block]:
    """The examples of every command's --help, from the docstring --help prints."""
    from jobqueue_demo.cli.main import all_commands

    out = []
    for command in all_commands().registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        text = (command.callback.__doc__ or "").split("Example:", 1)
        lines = text[1].splitlines() if len(text) == 2 else []
        commands = tuple(m.group(1) for line in lines if (m := COMMAND.match(line.strip())))
        out.append(Block(f"{name} --help", commands))
    return out


def activation() -> Path:
    """The activation script of the environment the tests run in: `. .venv/bin/activate`."""
    return Path(sys.executable).parent / "activate"


def fresh_env(dsn: str | None) -> dict[str, str]:
    """A new login shell's environment, nothing inherited from the test run but HOME."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    if dsn:
        env["JOBQUEUE_DEMO_DSN"] = dsn  # the documented variable: the test's server, not a new one each time
    return env


def run_pasted(command: str, cwd: Path, dsn: str | None, timeout: float) -> subprocess.CompletedProcess:
    """`command` as pasted into a fresh bash after the README's activation line."""
    script = f". {shlex.quote(str(activation()))}\n{command}"
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=fresh_env(dsn), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout,
    )
