"""Claim strategies against the same-run ceiling, on the embedded server and on a running one.

Usage: python bench/bench_workers.py [--jobs 1000] [--work-ms 1] [--repeat 3] [--workers 1,2,4,8,16]
                                     [--strategies skip-locked,for-update,...]
                                     [--dsn mysql://root@127.0.0.1:3306/test]
                                     [--json results.json]

The anchor is the ceiling (`own-rows`: the same transaction on rows no other worker touches),
run next to each strategy at each worker count, so each ratio compares runs made under the
same load. Prints, per server: skip-locked / for-update at 8 workers, skip-locked as a share
of the ceiling, and the deadlocks under READ COMMITTED and REPEATABLE READ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Run as a plain script from a checkout, without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobqueue_demo.server import open_server  # noqa: E402
from jobqueue_demo.sweep import (  # noqa: E402
    SWEEPABLE,
    SWEPT_STRATEGIES,
    SweepConfig,
    SweepResult,
    parse_counts,
    parse_names,
    sweep,
)


def report(where: str, result: SweepResult) -> None:
    print(f"== {result.server} ({where}): {result.jobs} jobs, work {result.work_ms:g} ms, median of {result.repeat}")
    for row in result.rows:
        run = row.run
        print(
            f"  {run.isolation:16s} {run.strategy:13s} x{run.workers:<3d} {run.jobs_per_s:8.0f} jobs/s"
            f"  {row.ceiling_share:5.0%} of ceiling  deadlocks {run.deadlocks}"
        )
    for h in result.headlines:
        print(
            f"  {h.isolation} at {h.workers} workers: skip-locked / for-update = {h.skip_locked_vs_for_update}x "
            f"(goal >= 3); skip-locked / ceiling = {h.skip_locked_share_of_ceiling:.0%} (goal >= 80 %)"
        )
    print(f"  deadlocks over the sweep: {result.deadlocks}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--work-ms", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="1,2,4,8,16")
    parser.add_argument("--strategies", default=",".join(SWEPT_STRATEGIES))
    parser.add_argument("--dsn", default="mysql://root@127.0.0.1:3306/test")
    parser.add_argument("--json", help="also write every result to this file")
    args = parser.parse_args()
    config = SweepConfig(
        strategies=parse_names(args.strategies, SWEEPABLE, "strategy"),
        workers=parse_counts(args.workers),
        jobs=args.jobs,
        work_ms=args.work_ms,
        repeat=args.repeat,
    )
    results = {}
    for where, dsn in (("embedded", None), (args.dsn.split("@")[-1], args.dsn)):
        with open_server(dsn) as server:
            results[where] = sweep(config, server)
        report(where, results[where])
    if args.json:
        Path(args.json).write_text(json.dumps({k: r.record() for k, r in results.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
