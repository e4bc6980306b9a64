"""The seed run imports only what it uses: what a deadlock, a stuck run, explore's resets, the
columns view or a dropped connection need is imported where it happens, off every run's
start-up (bench/bench_seed_vs_mysqltest.py measures the time)."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, dsn_of

RARE = (
    "jobqueue_demo.engine.deadlock",
    "jobqueue_demo.run.chain",
    "jobqueue_demo.run.stuck",
    "jobqueue_demo.engine.snapshot",
    "jobqueue_demo.render.columns",
    "socket",
)
SCRIPT = """
import sys
from jobqueue_demo.cli.main import entry
sys.argv = ["jobqueue-demo", "run", sys.argv[1], "--dsn", sys.argv[2]]
try:
    entry()
except SystemExit as e:
    assert not e.code, e.code
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""


def test_the_seed_run_leaves_the_rare_paths_unimported(embedded):
    seed = str(ROOT / "scenarios" / "skip-locked.yaml")
    done = subprocess.run([sys.executable, "-c", SCRIPT, seed, dsn_of(embedded)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-600:]
    loaded = set(done.stderr.split())
    assert "jobqueue_demo.run.driver" in loaded
    assert [m for m in RARE if m in loaded] == []
