"""docs/replay.md's worked example, run as pasted: each line it shows is printed, in order."""

from __future__ import annotations

import re

from conftest import ROOT
from examples import run_pasted

DOC = (ROOT / "docs" / "replay.md").read_text()


def test_the_worked_example_prints_what_the_doc_shows(tmp_path):
    block = re.search(r"^```\n(\$ jobqueue-demo replay .*?)^```", DOC, re.MULTILINE | re.DOTALL).group(1)
    command, *shown = block.splitlines()
    done = run_pasted(command.removeprefix("$ "), tmp_path, None, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout.splitlines()
    at = 0
    for line in shown:
        assert line in printed[at:], f"docs/replay.md shows {line!r}; the command printed:\n{done.stdout}"
        at = printed.index(line, at) + 1
    steps = (tmp_path / "my-lesson.yaml").read_text()
    for line in re.search(r"^```yaml\n(.*?)^```", DOC, re.MULTILINE | re.DOTALL).group(1).splitlines():
        assert line in steps, line
