"""Warm embedded-server start+connect+stop time, against connecting to a running server.

Usage: python bench/bench_embedded_start.py [--runs 7] [--dsn mysql://root@127.0.0.1:3306]

The anchor is measured in the same run, interleaved with the embedded runs, so
the ratio stays meaningful on a machine whose speed drifts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# Run as a plain script from a checkout, without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobqueue_demo.engine.mysql.embedded import EmbeddedServer, ensure_template, find_server_binary
from jobqueue_demo.engine.mysql.server import parse_dsn  # noqa: E402
from jobqueue_demo.engine.throwaway import cache_root  # noqa: E402


def embedded_run() -> tuple[float, float]:
    """(start+connect, stop) seconds for one embedded server."""
    started = time.perf_counter()
    server = EmbeddedServer()
    server.start()
    try:
        server.params.connect().close()
        ready = time.perf_counter()
    finally:
        server.stop()
    return ready - started, time.perf_counter() - ready


def anchor_run(dsn: str) -> float:
    params = parse_dsn(dsn)
    started = time.perf_counter()
    params.connect().close()
    return time.perf_counter() - started


def prepare_template() -> str:
    binary = find_server_binary()
    existed = (cache_root() / binary.template_key).is_dir()
    started = time.perf_counter()
    ensure_template(binary)
    elapsed = time.perf_counter() - started
    return f"template {'cached' if existed else f'built in {elapsed:.2f} s'} ({binary.template_key})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dsn", default="mysql://root@127.0.0.1:3306", help="the running server of the anchor")
    args = parser.parse_args()

    print(prepare_template())
    embedded_run()  # warm the page cache and the binary's version check
    starts, stops, anchors = [], [], []
    for _ in range(args.runs):
        anchors.append(anchor_run(args.dsn))
        start, stop = embedded_run()
        starts.append(start)
        stops.append(stop)

    start, stop = statistics.median(starts), statistics.median(stops)
    anchor = statistics.median(anchors)
    total = statistics.median(a + b for a, b in zip(starts, stops))
    print(f"runs: {args.runs}, load average: {os.getloadavg()[0]:.2f}")
    rows = [
        (f"anchor: connect to {parse_dsn(args.dsn).display()}", anchor),
        ("embedded: start + connect", start),
        ("embedded: stop", stop),
        ("embedded: start + connect + stop", total),
    ]
    for label, seconds in rows:
        print(f"  {label:<44} median {seconds * 1000:8.2f} ms")
    print(f"  ratio embedded / anchor: {total / anchor:.0f}x")

if __name__ == "__main__":
    main()
