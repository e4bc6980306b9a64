"""The `workers` examples, run as pasted, N times each: every run must complete with the invariants.

Usage: python bench/bench_workers_examples.py [--runs 10] [--dsn-runs 3]
                                               [--dsn mysql://root@127.0.0.1:3306/test]

Runs the first `workers --help` example (8 workers, 2000 jobs, skip-locked, REPEATABLE READ)
--runs times on the embedded default, then 2000 jobs at 8 workers --dsn-runs times each on the
--dsn server for skip-locked, for-update and skip-locked with --kill 3, the help example with
--kill 3 on the embedded MariaDB and (--engine postgresql) on the embedded PostgreSQL, every
strategy at 8 workers on the embedded PostgreSQL under both levels, and the broken layout
(--state-order done-first) once on the embedded server, which is expected to stall. Prints
per example: runs completed of runs made, jobs/s (median) and deadlocks, and the anchor: the
same example's done-first run in this sweep. Then every other example of `workers --help`,
`bench --help` and the README's workers section once, as pasted, in a temporary directory:
each must exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELP_EXAMPLE = ("workers", "--workers", "8", "--jobs", "2000", "--strategy", "skip-locked")
PG = ("--engine", "postgresql")
# A DSN in the environment would take the place of each example's own embedded server.
OWN_ENV = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
PG_STRATEGIES = ("for-update", "nowait-retry", "update-limit", "lease", "lease-heartbeat")


def run(args: tuple[str, ...]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "jobqueue_demo", *args, "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600,
        env=OWN_ENV,
    )
    lines = done.stdout.strip().splitlines()
    record = json.loads(lines[0]) if lines else {}
    record["exit"] = done.returncode
    if done.returncode:
        record["error"] = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return record


def report(name: str, records: list[dict]) -> bool:
    good = [r for r in records if r["exit"] == 0 and r.get("invariants_hold")]
    rates = [r["jobs_per_s"] for r in good]
    median = f"{statistics.median(rates):,.0f} jobs/s (median)" if rates else "-"
    deadlocks = [r.get("deadlocks", "-") for r in records]
    print(f"{name}: {len(good)} of {len(records)} completed, {median}, deadlocks {deadlocks}", flush=True)
    for r in records:
        if r["exit"]:
            print(f"  exit {r['exit']}: {r.get('error')}", flush=True)
        if "diagnosis" in r:
            waits = r["diagnosis"]["waits"]
            modes = sorted({f"{w['mode']} on {w['index']} {w['record']}" for w in waits})
            print(f"  diagnosis in the JSON: {len(waits)} lock waits; {'; '.join(modes)}", flush=True)
    return len(good) == len(records)


def pasted_examples() -> list[str]:
    """The example lines of `workers --help`, `bench --help` and the README's workers code block."""
    found = []
    for command in ("workers", "bench"):
        text = subprocess.run(
            [sys.executable, "-m", "jobqueue_demo", command, "--help"], capture_output=True, text=True, cwd=ROOT
        ).stdout
        found += [line.strip() for line in text.split("Example:", 1)[1].splitlines() if line.strip().startswith("jobqueue-demo")]
    readme = (ROOT / "README.md").read_text().split("## Workers: the queue under load", 1)[1].split("```")[1]
    found += [line.split("#", 1)[0].strip() for line in readme.splitlines() if line.startswith("jobqueue-demo")]
    return list(dict.fromkeys(found))


def run_pasted(line: str, folder: str) -> int:
    """One example as a user pastes it (the installed command next to this interpreter)."""
    command = str(Path(sys.executable).with_name("jobqueue-demo"))
    done = subprocess.run(
        [command, *shlex.split(line)[1:]], capture_output=True, text=True, cwd=folder, timeout=900, env=OWN_ENV
    )
    last = (done.stdout.strip().splitlines() or [""])[-1]
    print(f"  exit {done.returncode}: {line}  ->  {last[:100]}", flush=True)
    return done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--dsn-runs", type=int, default=3)
    parser.add_argument("--dsn", default="mysql://root@127.0.0.1:3306/test")
    args = parser.parse_args()
    dsn = ("--dsn", args.dsn)
    examples = [
        ("help example, embedded", HELP_EXAMPLE, args.runs),
        ("skip-locked x8, 2000 jobs, --dsn", (*HELP_EXAMPLE, *dsn), args.dsn_runs),
        ("for-update x8, 2000 jobs, --dsn", ("workers", "-w", "8", "-j", "2000", "-s", "for-update", *dsn), args.dsn_runs),
        ("skip-locked x8, 2000 jobs, --kill 3, --dsn", (*HELP_EXAMPLE, "--kill", "3", *dsn), args.dsn_runs),
        ("help example, embedded, --kill 3", (*HELP_EXAMPLE, "--kill", "3"), args.dsn_runs),
        ("help example, embedded PostgreSQL", (*HELP_EXAMPLE, *PG), args.dsn_runs),
        ("help example, embedded PostgreSQL, --kill 3", (*HELP_EXAMPLE, "--kill", "3", *PG), args.dsn_runs),
        *(
            (f"{strategy} x8, 2000 jobs, {isolation}, embedded PostgreSQL",
             ("workers", "-w", "8", "-j", "2000", "-s", strategy, "--isolation", isolation, *PG), 1)
            for strategy in PG_STRATEGIES for isolation in ("read-committed", "repeatable-read")
        ),
    ]
    ok = True
    for name, example, times in examples:
        ok &= report(name, [run(example) for _ in range(times)])
    report("anchor: help example with --state-order done-first (the old layout), embedded",
           [run((*HELP_EXAMPLE, "--state-order", "done-first"))])
    print("every other example, once, as pasted:", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        codes = [run_pasted(line, folder) for line in pasted_examples() if line.split()[1:] != list(HELP_EXAMPLE)]
        ok &= all(code == 0 for code in codes)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
