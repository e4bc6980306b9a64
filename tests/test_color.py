"""One colour policy (render/color.py): rich's decision, taken without importing rich, for the
transcript, the columns view and every rich Console alike."""

from __future__ import annotations

import io
import itertools
import re

import pytest
from rich.console import Console

from jobqueue_demo.render.color import color_on, console

from conftest import cli, dsn_of

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


SETTINGS = {
    "NO_COLOR": (None, "", "1"),
    "FORCE_COLOR": (None, "", "1"),
    "TTY_COMPATIBLE": (None, "0", "1"),
    "TERM": ("xterm-256color", "dumb"),
}


@pytest.mark.parametrize("tty", [False, True])
@pytest.mark.parametrize("values", list(itertools.product(*SETTINGS.values())), ids=str)
def test_the_policy_is_richs_decision(monkeypatch, tty, values):
    for name, value in zip(SETTINGS, values):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    stream = Stream(tty)
    rich = Console(file=stream)
    assert color_on(stream) == (rich.color_system is not None and not rich.no_color)
    # A Console of ours styles exactly when the policy says so.
    ours = console(stream)
    ours.print("x", style="bold cyan")
    assert bool(ANSI.search(stream.getvalue())) == color_on(stream)


def test_forced_colour_paints_the_transcript_and_changes_no_text(embedded):
    plain = cli("run", "skip-locked", "--dsn", dsn_of(embedded))
    painted = cli("run", "skip-locked", "--dsn", dsn_of(embedded), env={"NO_COLOR": "", "FORCE_COLOR": "1", "TERM": "xterm"})
    refused = cli("run", "skip-locked", "--dsn", dsn_of(embedded), env={"FORCE_COLOR": "1"})  # NO_COLOR=1 wins
    assert plain.returncode == painted.returncode == refused.returncode == 0
    assert "\x1b[1;36mA> BEGIN;\x1b[0m" in painted.stdout
    assert "\x1b[" not in plain.stdout + refused.stdout

    def text(out: str) -> list[str]:
        return [re.sub(r"\d+ ms", "N ms", line) for line in ANSI.sub("", out).splitlines()]

    assert text(painted.stdout) == text(plain.stdout)
