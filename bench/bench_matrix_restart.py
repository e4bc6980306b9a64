"""What a read-only --matrix variable costs per combination: a second embedded server started
with it, against a combination on the running server.

Usage: python bench/bench_matrix_restart.py [--runs 7] [--lesson nowait]

Both are one combination of `verify LESSON --matrix ...` on one warm embedded server, in the
same process and interleaved, so the ratio holds on a machine whose speed drifts. The anchor
sets a session variable (isolation); the other starts a server with
--innodb-rollback-on-timeout=ON (the running one has OFF).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

# Run as a plain script from a checkout, without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobqueue_demo import api as core  # noqa: E402
from jobqueue_demo.cli.matrix import lesson_matrix  # noqa: E402

ANCHOR = "isolation=repeatable-read"
RESTARTED = "innodb_rollback_on_timeout=ON"


def one(scenario, server, axis: str) -> tuple[float, str]:
    """Seconds for one combination, and the line naming the restart, if any."""
    out = io.StringIO()
    started = time.perf_counter()
    with redirect_stdout(out):
        lesson_matrix([scenario], server, [axis], 10.0)
    restart = [line for line in out.getvalue().splitlines() if line.startswith("-- a second embedded server")]
    return time.perf_counter() - started, (restart[0] if restart else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--lesson", default="nowait")
    args = parser.parse_args()

    scenario = core.load(args.lesson)
    with core.server(None) as server:
        one(scenario, server, RESTARTED)  # warm the page cache for the second server's copy
        anchors, restarts, starts = [], [], []
        for _ in range(args.runs):
            anchors.append(one(scenario, server, ANCHOR)[0])
            seconds, line = one(scenario, server, RESTARTED)
            restarts.append(seconds)
            starts.append(float(line.rsplit(": ", 1)[1].removesuffix(" s")))
    anchor, restart = statistics.median(anchors), statistics.median(restarts)
    print(f"lesson: {args.lesson}, runs: {args.runs}, load average: {os.getloadavg()[0]:.2f}")
    print(f"anchor: one combination on the running server ({ANCHOR}): {anchor * 1000:.0f} ms")
    print(f"one combination on a second server ({RESTARTED}): {restart * 1000:.0f} ms, {restart / anchor:.1f}x the anchor")
    print(f"  of which starting the server (copy, start, first connection): {statistics.median(starts) * 1000:.0f} ms")
    print(f"  so a restart adds {(restart - anchor) * 1000:.0f} ms per combination that needs one")


if __name__ == "__main__":
    main()
