"""Every command in the README's fenced blocks and in every --help example runs as pasted.

Each block runs in a fresh bash (clean environment, a new empty directory) after the
README's activation line, one command after another, as a user pastes it. The server is the
test's embedded one, handed over the documented way ($JOBQUEUE_DEMO_DSN), so each command
does not start its own. Commands that take minutes are listed in SLOW, by exact text, and
run by bench/bench_slow_examples.py instead: nothing is left out without being named here.
A command shown in more than one block that reads and writes no file runs once, in the
first block that shows it: the same command on the same server answers alike, and each
block's checks are made on that run.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter

import pytest
from conftest import dsn_of, local_server_reachable
from examples import help_blocks, readme_blocks, run_pasted

# Run by bench/bench_slow_examples.py, each with why it is too slow for the suite.
SLOW = {
    "jobqueue-demo bench": "the default sweep of strategies, workers and isolation levels: about 40 s",
    "jobqueue-demo run skip-locked --pace 3": "one step every 3 s: 14 steps take 40 s",
    "jobqueue-demo workers --workers 8 --jobs 2000 --strategy skip-locked": "2,000 jobs on 8 processes",
    "jobqueue-demo bench --jobs 300 --workers 1,2,4 --strategies skip-locked,for-update": "a sweep of 6 runs",
    "jobqueue-demo bench --jobs 300 --workers 2,4 --strategies skip-locked,lease --kill 1 --json": "a sweep of 8 runs with kills",
    "jobqueue-demo bench --engine postgresql --plot workers-bench-pg.png": "the default sweep on PostgreSQL: about 40 s",
}
# Examples that show a failure on purpose, with the exit code the README documents for it.
EXIT_CODES = {
    "jobqueue-demo explore claim-without-lock-explore --faults rollback,disconnect": 1,  # the double claim
    "jobqueue-demo explore claim-without-lock-explore --matrix innodb_snapshot_isolation=ON,OFF": 1,  # under both
    "jobqueue-demo explore claim-without-lock-explore --matrix innodb_snapshot_isolation=ON,OFF "
    "--matrix isolation=read-committed,repeatable-read": 1,
    "jobqueue-demo explore cluster-skip-locked-explore --sample 600 --seed 1": 1,  # the email sent twice
    "jobqueue-demo workers --queue read-then-mark-bug -w 4 --jobs 200 --work-ms 2 --isolation read-committed": 1,  # jobs done twice
    "jobqueue-demo explore --queue read-then-mark-bug": 1,  # the double claim, every schedule
    "jobqueue-demo workers --queue delayed-job-bug -w 4 --jobs 300": 1,  # the reserve and the DELETE deadlock
    "jobqueue-demo explore lost-claim.spec --faults disconnect": 1,  # the job a crashed worker leaves running
}
LOCAL_SERVER = "127.0.0.1:3306"


def galera_installed() -> bool:
    """Whether the cluster examples can start their embedded Galera cluster here."""
    from jobqueue_demo.engine.galera.cluster import find_provider
    from jobqueue_demo.errors import ServerError

    try:
        find_provider()
    except ServerError:
        return False
    return True
BLOCKS = readme_blocks() + help_blocks()
# A redirection, an output file or a file's name: what the command finds or leaves in its block's folder.
TOUCHES_FILES = re.compile(r"[<>]|(^|\s)-o\s|\.(yaml|yml|html|md|json|txt|png|svg)\b")
SHOWN_TWICE = {c for c, n in Counter(c for b in BLOCKS for c in set(b.commands)).items() if n > 1 and not TOUCHES_FILES.search(c)}
_shared_runs: dict[str, subprocess.CompletedProcess] = {}


def run_example(command: str, folder, dsn: str) -> subprocess.CompletedProcess:
    if command not in SHOWN_TWICE:
        return run_pasted(command, folder, dsn, timeout=180)
    if command not in _shared_runs:
        _shared_runs[command] = run_pasted(command, folder, dsn, timeout=180)
    return _shared_runs[command]


def test_every_command_has_examples_and_the_readme_has_blocks():
    assert len(readme_blocks()) >= 4
    assert all(block.commands for block in help_blocks()), [b.where for b in help_blocks() if not b.commands]


def test_examples_name_lessons_that_work_from_anywhere():
    """A path into the checkout fails anywhere else; a lesson's name works after pip install."""
    paths = [c for block in BLOCKS for c in block.commands if "scenarios/" in c or ".yaml" in c and "my-" not in c]
    assert paths == []


def test_every_slow_example_is_still_shown_somewhere():
    """A SLOW entry that no longer matches an example would hide nothing and mean nothing."""
    shown = {command for block in BLOCKS for command in block.commands}
    assert set(SLOW) <= shown, set(SLOW) - shown


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_examples_run_as_pasted(block, embedded, tmp_path):
    unreachable = []
    for command in block.commands:
        if command in SLOW:
            continue
        if LOCAL_SERVER in command and not local_server_reachable():
            unreachable.append(command)
            continue
        if "cluster" in command and not galera_installed():
            unreachable.append(command)
            continue
        done = run_example(command, tmp_path, dsn_of(embedded))
        expected = EXIT_CODES.get(command, 0)
        assert done.returncode == expected, f"{block.where}: {command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr and "command not found" not in done.stderr
        assert done.stdout.strip() or "-o " in command or ">" in command, f"{command}: printed nothing"
    if unreachable:
        pytest.skip(f"{unreachable} need the server on {LOCAL_SERVER} (not answering) or the galera-4 package (missing)")


def test_a_handout_written_to_a_file_is_complete(embedded, tmp_path):
    done = run_pasted("jobqueue-demo run deadlock > handout.txt", tmp_path, dsn_of(embedded), timeout=120)
    assert done.returncode == 0, done.stderr
    handout = (tmp_path / "handout.txt").read_text()
    title = handout.splitlines()[0]
    assert title.startswith("-- Two claimers deadlock, the server picks a victim"), title
    assert f"on {embedded.label} (" in title
    assert done.stderr == ""
