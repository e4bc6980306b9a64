"""Claim strategies against the same-run ceiling, and the recovery of killed workers' jobs.

Usage: python bench/bench_workers.py [--jobs 1000] [--work-ms 0,1,5] [--repeat 3] [--workers 8]
                                     [--strategies skip-locked,for-update]
                                     [--kill 3] [--kill-work-ms 5]
                                     [--dsn mysql://root@127.0.0.1:3306/test]
                                     [--engines mysql,postgresql]
                                     [--json results.json]

One sweep, on the embedded server of each of --engines and on --dsn: for each --work-ms, the strategies next to the
ceiling (`own-rows`: the same transaction on rows no other worker touches) under both isolation
levels, median of --repeat interleaved runs. The anchor of each ratio is in the same run: the
ceiling for "share of ceiling", for-update for "skip-locked / for-update".

Then the kill comparison: skip-locked, for-update, lease and lease-heartbeat at --workers with
--kill workers SIGKILLed mid-job (--kill-work-ms of work, REPEATABLE READ, on --dsn and on the
embedded PostgreSQL when postgresql is among --engines): the time
until a killed worker's job ran again, the jobs run twice (external effects), jobs/s, and the
invariants.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# Run as a plain script from a checkout, without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobqueue_demo.engine.seam import open_server  # noqa: E402
from jobqueue_demo.workers.crew import WorkersConfig, run_workers  # noqa: E402
from jobqueue_demo.workers.sweep import SWEEPABLE, SweepConfig, SweepResult, parse_counts, parse_names, sweep  # noqa: E402

KILL_STRATEGIES = ("skip-locked", "for-update", "lease", "lease-heartbeat")


def report(where: str, result: SweepResult) -> None:
    print(f"== {result.server} ({where}): {result.jobs} jobs, work {result.work_ms:g} ms, median of {result.repeat}")
    for row in result.rows:
        run = row.run
        print(
            f"  {run.isolation:16s} {run.strategy:13s} x{run.workers:<3d} {run.jobs_per_s:8.0f} jobs/s"
            f"  {row.ceiling_share:5.0%} of ceiling  deadlocks {run.deadlocks}"
        )
    for h in result.headlines:
        ratio = "-" if h.skip_locked_vs_for_update is None else f"{h.skip_locked_vs_for_update}x"
        share = "-" if h.skip_locked_share_of_ceiling is None else f"{h.skip_locked_share_of_ceiling:.0%}"
        print(
            f"  {h.isolation} at {h.workers} workers: skip-locked / for-update = {ratio} (goal >= 3); "
            f"skip-locked / ceiling = {share} (goal >= 80 %)"
        )
    print(f"  deadlocks over the sweep: {result.deadlocks}", flush=True)


def kill_comparison(server, args) -> list[dict]:
    """Each strategy --repeat times with kills; per strategy the medians and the worst case."""
    print(f"== kills: {args.kill} of {max(args.workers_list)} workers, {args.jobs} jobs, work {args.kill_work_ms:g} ms, "
          f"repeatable-read, {server.label} ({server.where}), {args.repeat} runs each")
    out = []
    for strategy in KILL_STRATEGIES:
        config = WorkersConfig(strategy, "repeatable-read", max(args.workers_list), args.jobs,
                               work_ms=args.kill_work_ms, kill=args.kill)
        runs = [run_workers(config, server) for _ in range(args.repeat)]
        reruns = [ms for r in runs for ms in r.rerun_ms if ms is not None]
        record = {
            "strategy": strategy,
            "lease_ms": runs[0].lease_ms,
            "jobs_per_s": statistics.median(r.jobs_per_s for r in runs),
            "rerun_ms_median": statistics.median(reruns) if reruns else None,
            "rerun_ms_max": max(reruns) if reruns else None,
            "ran_twice": [r.external_duplicates for r in runs],
            "leases_lost": [r.leases_lost for r in runs],
            "invariants_hold": all(r.invariants_hold for r in runs),
        }
        out.append(record)
        lease = f" (lease {record['lease_ms']:g} ms)" if record["lease_ms"] else ""
        print(
            f"  {strategy + lease:32s} {record['jobs_per_s']:6.0f} jobs/s  killed job ran again after "
            f"{record['rerun_ms_median']:.0f} ms median, {record['rerun_ms_max']:.0f} ms worst; "
            f"jobs run twice {record['ran_twice']}; invariants {'hold' if record['invariants_hold'] else 'VIOLATED'}",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--work-ms", default="0,1,5")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="8")
    parser.add_argument("--strategies", default="skip-locked,for-update")
    parser.add_argument("--kill", type=int, default=3)
    parser.add_argument("--kill-work-ms", type=float, default=5.0)
    parser.add_argument("--dsn", default="mysql://root@127.0.0.1:3306/test", help="'' for none")
    parser.add_argument("--engines", default="mysql,postgresql", help="embedded servers to sweep")
    parser.add_argument("--json", help="also write every result to this file")
    args = parser.parse_args()
    args.workers_list = parse_counts(args.workers)
    strategies = parse_names(args.strategies, SWEEPABLE, "strategy")
    results: dict = {}
    servers = [(f"embedded {engine}", None, engine) for engine in args.engines.split(",") if engine]
    servers += [(args.dsn.split("@")[-1], args.dsn, "mysql")] if args.dsn else []
    for where, dsn, engine in servers:
        with open_server(dsn, engine) as server:
            for work_ms in (float(w) for w in args.work_ms.split(",")):
                config = SweepConfig(strategies=strategies, workers=args.workers_list, jobs=args.jobs, work_ms=work_ms,
                                     repeat=args.repeat)
                result = sweep(config, server)
                results[f"{where} {work_ms:g} ms"] = result.as_dict()
                report(where, result)
            if args.kill and (dsn is not None or engine == "postgresql"):
                results[f"kills {where}"] = kill_comparison(server, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
