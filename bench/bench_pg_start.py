"""The embedded PostgreSQL's start+connect+stop time, cold (initdb into an empty cache) and
warm (a copy of the cached template), against the embedded MariaDB's warm start.

Usage: python bench/bench_pg_start.py [--runs 7]

The anchor (the embedded MariaDB or MySQL server, started the same way) is measured in the
same run, interleaved with the PostgreSQL runs, so the ratio stays meaningful on a machine
whose speed drifts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as a plain script from a checkout, without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobqueue_demo.engine.mysql.embedded import EmbeddedServer  # noqa: E402
from jobqueue_demo.engine.postgresql.embedded import EmbeddedPostgres  # noqa: E402


def timed(server) -> tuple[float, float]:
    """(start + connect, stop) seconds for one embedded server."""
    started = time.perf_counter()
    server.start()
    try:
        server.params.connect().close()
        ready = time.perf_counter()
    finally:
        server.stop()
    return ready - started, time.perf_counter() - ready


def cold_start() -> float:
    """Start + connect with an empty cache: initdb, then the first copy."""
    cache = tempfile.mkdtemp(prefix="jqd-bench-cache-")
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = cache
    try:
        return timed(EmbeddedPostgres())[0]
    finally:
        if before is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = before
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    cold = cold_start()
    timed(EmbeddedPostgres())  # the cached template, the page cache and both binaries warm
    timed(EmbeddedServer())
    pg, anchor = [], []
    for _ in range(args.runs):
        anchor.append(sum(timed(EmbeddedServer())))
        pg.append(timed(EmbeddedPostgres()))
    start = statistics.median(s for s, _ in pg)
    stop = statistics.median(s for _, s in pg)
    total = statistics.median(a + b for a, b in pg)
    mariadb = statistics.median(anchor)
    print(f"runs: {args.runs}, load average: {os.getloadavg()[0]:.2f}")
    rows = [
        ("PostgreSQL cold: initdb + start + connect", cold),
        ("PostgreSQL warm: start + connect", start),
        ("PostgreSQL warm: stop", stop),
        ("PostgreSQL warm: start + connect + stop", total),
        ("anchor: embedded MariaDB/MySQL, start + connect + stop", mariadb),
    ]
    for label, seconds in rows:
        print(f"  {label:<56} median {seconds * 1000:8.2f} ms")
    print(f"  ratio PostgreSQL warm / anchor: {total / mariadb:.2f}x")


if __name__ == "__main__":
    main()
