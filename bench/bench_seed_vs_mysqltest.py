"""Whole-process time of the seed lesson: jobqueue-demo against mariadb-test, same server.

Runs are interleaved (one of each per round) so drift in the machine's load hits both alike;
the medians and their ratio are printed. A second table times the warm embedded default
(a private server started and stopped by the run) against the same anchor.

Start-up: the floor of the stack is `python -c "import MySQLdb, yaml, typer"`; the run's own
work is the seed run timed inside an already-started process that has run it once (load,
connect, sweep, run, drop). The last lines are the whole `--dsn` process against floor + own
work, all measured in this run: in wall-clock time, each round's own ratio, and in CPU time
(user + system), which a machine shared with other work disturbs less.

    .venv/bin/python bench/bench_seed_vs_mysqltest.py [--rounds 9] [--host 127.0.0.1 --port 3306]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / ".venv" / "bin" / "jobqueue-demo"
SEED = ROOT / "scenarios" / "skip-locked.yaml"


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(command: list[str], stdin_path: Path | None = None, env: dict | None = None, cpu: list | None = None) -> float:
    """Wall-clock seconds of one process; its CPU seconds appended to `cpu` when given."""
    stdin = open(stdin_path) if stdin_path else subprocess.DEVNULL
    try:
        used = children_cpu()
        started = time.perf_counter()
        done = subprocess.run(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        elapsed = time.perf_counter() - started
    finally:
        if stdin_path:
            stdin.close()
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr.decode()[-400:]}")
    if cpu is not None:
        cpu.append(children_cpu() - used)
    return elapsed


PYTHON = ROOT / ".venv" / "bin" / "python"
FLOOR = [PYTHON, "-c", "import MySQLdb, yaml, typer"]
# The tool raises the collector's threshold before its imports and freezes what is alive
# before it exits (cli/__init__.py: entry); the floor started and ended the same way shows
# how much of the ratio above comes from that.
FLOOR_AS_TOOL = [PYTHON, "-c", "import gc; gc.set_threshold(50_000); import MySQLdb, yaml, typer; gc.freeze()"]
# Prints the milliseconds of the seed run itself: the second run in one process, so that
# every import, lazy ones included, is already done and counts as start-up, not as work.
OWN_WORK = """
import io, sys, time
from jobqueue_demo import api
from jobqueue_demo.render.transcript import TranscriptWriter, event_lines
for _ in range(2):
    started, used = time.perf_counter(), time.process_time()
    loaded = api.load(sys.argv[1])
    with api.server(sys.argv[2]) as server:
        writer = TranscriptWriter(io.StringIO(), loaded.session_names, False)
        api.run(loaded, server, 10.0, lambda event: writer.write(event_lines(event)))
print((time.perf_counter() - started) * 1000.0, (time.process_time() - used) * 1000.0)
"""


def own_work_ms(dsn: str, env: dict) -> tuple[float, float]:
    """Wall-clock and CPU milliseconds of the seed run inside a warm process."""
    done = subprocess.run([str(PYTHON), "-c", OWN_WORK, str(SEED), dsn], capture_output=True, text=True, env=env, check=True)
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3306)
    args = parser.parse_args()
    mysqltest = shutil.which("mariadb-test") or shutil.which("mysqltest")
    if not mysqltest:
        sys.exit("mariadb-test not found (Debian package mariadb-test; 'make install' installs it)")
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    env.update(MYSQL_HOST=args.host, MYSQL_PORT=str(args.port), NO_COLOR="1")
    dsn = f"mysql://root@{args.host}:{args.port}/test"
    ours = [TOOL, "run", str(SEED), "--dsn", dsn]
    anchor = [mysqltest, f"--host={args.host}", f"--port={args.port}", "--user=root", "--silent"]
    embedded = [TOOL, "run", str(SEED)]
    timed(embedded, env=env)  # warms the cached datadir template
    rows = {
        "jobqueue-demo --dsn": [], "mariadb-test (anchor)": [], "jobqueue-demo embedded": [],
        "floor (import MySQLdb, yaml, typer)": [], "floor, the tool's collector policy": [],
    }
    own, cpu = [], {"ours": [], "floor": [], "own": []}
    for _ in range(args.rounds):
        rows["jobqueue-demo --dsn"].append(timed([str(c) for c in ours], env=env, cpu=cpu["ours"]))
        rows["mariadb-test (anchor)"].append(timed(anchor, stdin_path=ROOT / "bench" / "seed.test", env=env))
        rows["jobqueue-demo embedded"].append(timed([str(c) for c in embedded], env=env))
        rows["floor (import MySQLdb, yaml, typer)"].append(timed([str(c) for c in FLOOR], env=env, cpu=cpu["floor"]))
        rows["floor, the tool's collector policy"].append(timed([str(c) for c in FLOOR_AS_TOOL], env=env))
        wall_ms, cpu_ms = own_work_ms(dsn, env)
        own.append(wall_ms / 1000.0)
        cpu["own"].append(cpu_ms / 1000.0)
    base = statistics.median(rows["mariadb-test (anchor)"])
    print(f"seed lesson, whole process, median of {args.rounds} interleaved rounds")
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"  {name:36s} {median * 1000:8.1f} ms   {median / base:5.2f}x anchor")
    floor, work = statistics.median(rows["floor (import MySQLdb, yaml, typer)"]), statistics.median(own)
    whole = statistics.median(rows["jobqueue-demo --dsn"])
    print(f"  {'own work, in process':36s} {work * 1000:8.1f} ms")
    print(
        f"start-up: --dsn whole process {whole * 1000:.1f} ms = {whole / (floor + work):.2f}x "
        f"(floor {floor * 1000:.1f} ms + own work {work * 1000:.1f} ms); overhead {(whole - floor - work) * 1000:.1f} ms"
    )
    as_tool = statistics.median(rows["floor, the tool's collector policy"])
    print(f"  against the floor with the tool's collector policy: {whole / (as_tool + work):.2f}x")
    # Each round's own ratio: how far one round's load can move the figure above.
    rounds = sorted(w / (f + o) for w, f, o in zip(rows["jobqueue-demo --dsn"], rows["floor (import MySQLdb, yaml, typer)"], own))
    quarter = len(rounds) // 4
    print(
        f"  per round: {rounds[0]:.2f}x to {rounds[-1]:.2f}x, middle half {rounds[quarter]:.2f}x to "
        f"{rounds[-1 - quarter]:.2f}x; load average {os.getloadavg()[0]:.2f}"
    )
    whole, floor, work = (statistics.median(cpu[k]) for k in ("ours", "floor", "own"))
    print(
        f"start-up in CPU time: --dsn whole process {whole * 1000:.1f} ms = {whole / (floor + work):.2f}x "
        f"(floor {floor * 1000:.1f} ms + own work {work * 1000:.1f} ms)"
    )
    print("goals: --dsn at most 4x the anchor; within 1.25x of floor + own work; warm embedded run at most 1 s")


if __name__ == "__main__":
    main()
