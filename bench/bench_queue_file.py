"""A queue file costs nothing: queues/skip-locked.yaml (the built-in strategy's statements) against
the built-in `skip-locked` strategy in the same run, and `explore --queue` on a three-statement
claim (queues/solid-queue.yaml) timed whole.

Usage: python bench/bench_queue_file.py [--jobs 1000] [--workers 4] [--repeat 5]
                                        [--engines mysql,postgresql] [--dsn mysql://root@127.0.0.1:3306/]

For each server (the embedded one of each of --engines, and --dsn): --repeat interleaved pairs of
runs (built-in, then the file, then the file, then built-in...), READ COMMITTED; the medians'
jobs/s and their ratio (the anchor: the built-in strategy in the same run; goal >= 0.90). Then
the explore of solid-queue.yaml: schedules and seconds (goal: the whole space under 30 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# Run as a plain script from a checkout, without installing the package.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobqueue_demo import api  # noqa: E402
from jobqueue_demo.engine.seam import open_server  # noqa: E402


def throughput(server, args) -> float:
    queue = api.load_queue(str(ROOT / "queues" / "skip-locked.yaml"))
    common = {"isolation": "read-committed", "workers": args.workers, "jobs": args.jobs}
    built_in, from_file = [], []
    for i in range(args.repeat):
        order = ((built_in, None), (from_file, queue)) if i % 2 == 0 else ((from_file, queue), (built_in, None))
        for runs, file in order:
            summary = api.run_workers(api.workers_config(queue=file, **common), server)
            assert summary.invariants_hold, summary.verdict
            runs.append(summary.jobs_per_s)
    ratio = statistics.median(from_file) / statistics.median(built_in)
    print(f"== {server.label}: {args.jobs} jobs, {args.workers} workers, read-committed, median of {args.repeat}")
    print(f"  built-in skip-locked    {statistics.median(built_in):8.0f} jobs/s  {sorted(built_in)}")
    print(f"  queues/skip-locked.yaml {statistics.median(from_file):8.0f} jobs/s  {sorted(from_file)}")
    print(f"  file / built-in = {ratio:.3f} (goal >= 0.90)", flush=True)
    return ratio


def explore_time(server) -> float:
    scenario = api.queue_scenario(str(ROOT / "queues" / "solid-queue.yaml"))
    started = time.perf_counter()
    report = api.explore(scenario, server, api.explore_options("", None, None, None, 2, 10.0))
    seconds = time.perf_counter() - started
    print(f"  explore --queue solid-queue (a three-statement claim): {report.explored:,} schedules, complete "
          f"{report.complete}, {seconds:.1f} s (goal < 30 s), failed {report.failed}", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engines", default="mysql,postgresql")
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    targets = [(None, engine) for engine in args.engines.split(",") if engine] + ([(args.dsn, None)] if args.dsn else [])
    for dsn, engine in targets:
        with open_server(dsn, engine) as server:
            throughput(server, args)
            explore_time(server)


if __name__ == "__main__":
    main()
