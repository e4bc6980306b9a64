"""The README and --help examples that take too long for the test suite, run as pasted.

tests/test_examples.py runs every other example and names these in its SLOW list; this
script runs exactly that list, the same way (a fresh bash after the README's activation
line, in an empty directory, on one embedded server handed over as $JOBQUEUE_DEMO_DSN), and
prints each one's exit code and time against a named anchor from the same run: the plain
`jobqueue-demo run skip-locked`.

    .venv/bin/python bench/bench_slow_examples.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conftest import dsn_of  # noqa: E402
from examples import run_pasted  # noqa: E402
from test_examples import EXIT_CODES, SLOW  # noqa: E402

from jobqueue_demo.engine.seam import open_server  # noqa: E402

ANCHOR = "jobqueue-demo run skip-locked"


def timed(command: str, dsn: str) -> tuple[int, float, str]:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        done = run_pasted(command, Path(folder), dsn, timeout=1800)
        return done.returncode, time.perf_counter() - started, done.stderr.strip().splitlines()[-1:]


def main() -> int:
    failed = 0
    with open_server(None) as server:
        dsn = dsn_of(server)
        _, anchor_s, _ = timed(ANCHOR, dsn)
        print(f"anchor: {ANCHOR}: {anchor_s:.1f} s on {server.label}")
        for command, why in SLOW.items():
            code, seconds, last = timed(command, dsn)
            ok = code == EXIT_CODES.get(command, 0)
            failed += not ok
            print(f"  {'ok ' if ok else 'FAILED'} exit {code}  {seconds:7.1f} s  {seconds / anchor_s:6.1f}x anchor  {command}  ({why})")
            if not ok:
                print(f"         {last}")
    print(f"{len(SLOW) - failed} of {len(SLOW)} slow examples ran as documented")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
