"""PostgreSQL's isolationtester against jobqueue-demo on the same isolation specs and server.

The anchor, in the same run on the same server: PostgreSQL's own isolationtester (the one
Debian's postgresql-15 ships in pgxs) running each spec of bench/specs/ in a database made
for it once. Our side runs the same permutations: until jobqueue-demo reads .spec files, it
is `jobqueue-demo explore` on the equivalent scenario next to each spec (same setup, sessions
and steps; bench/specs/*.yaml). Pointing our side at the .spec itself is one line:
`ours_input()` returns `spec` instead of `spec.with_suffix(".yaml")`.

Each tool runs each spec twice a round, whole processes as a user runs them: all its
permutations, and one (isolationtester: the spec with one `permutation` line; ours:
--max-schedules 1). isolationtester's steady state per permutation is the difference,
(all - one) / (N - 1); ours is timed in its steady state itself (STEADY: one runner's
schedules, in a process of its own), since our fixed cost, mostly the server's CREATE
DATABASE, moves by more than a small spec's every schedule takes. The fixed cost is the
one-permutation run less the steady state. isolationtester is also run with a CREATE
DATABASE and DROP DATABASE around it (`+ fresh db`), the way
/work/shared/tools/compare-isolationtester runs it: jobqueue-demo makes a scratch database
and a role of its own every run. Beside the wall time, the CPU of the client's own process
per permutation. Rounds interleave the tools; medians.

Goals: a spec's permutations in no more time than isolationtester takes (whole process),
and a steady state of at most half of isolationtester's time per permutation.

What each change bought, measured on the shared PostgreSQL 15 of a 2-core machine that three
other agents loaded (load average 3-5), so every figure moves by 2x from run to run: read the
ratios against the anchor of the same run, and the ranges.

Where the time went before (in-process phase timings, one runner, ms per schedule; pair =
skip-locked-pair, 20 read-only schedules; mixed = skip-locked-mixed, 210 that write):
pair 5.4 = walk 1.5 + session resets 0.55 + table restore 3.4; mixed 6.4-10.8 = walk 2.1-3.8 +
resets 0.5-0.9 + restore 3.8-6.1; isolationtester 4.0-4.6 per permutation in the same minutes.
The restore (TRUNCATE + INSERT ... SELECT, one transaction) costs what isolationtester's own
per-permutation setup and teardown cost: each btree index it rebuilds (the key, the TOAST
table's) syncs its file. The fixed cost, 0.37-0.46 s quiet and up to 0.8 s loaded: CREATE
DATABASE of the scratch database 125-390 ms (it copies template1, 7 MB through the WAL),
importing psycopg and describing the server 80-130 ms, Python and the CLI's imports 100 ms,
DROP DATABASE 13-135 ms (a checkpoint, on PostgreSQL 15), six connections and some 25 round
trips 30-40 ms. isolationtester's own is 20-35 ms: it is given a database.

1. A schedule that sent no statement that may write a row skips the restore
   (postgresql/snapshot.py may_write; a row lock moves no row): pair 5.4 -> 1.05-1.3 ms per
   schedule (embedded server 1.05). A schedule that writes still pays it.
2. Every session's reset sent before any answer is read (reset_sessions): resets 0.62 ->
   0.41 ms a schedule with three sessions, A/B in the same minutes (lease: 9.38 -> 8.95 ms).
3. /proc/self/statm (the bound on a row's memory) kept open and read with pread: 25 -> 2 us
   a read, some 40 reads a schedule; explore's CPU per schedule 1.7-1.9 -> 1.0-1.2 ms.
4. Runners beyond the first (--jobs, 2 by default) start only once the schedules left
   outweigh opening one: pair's whole process 1.19 -> 0.55 s (a second scratch database
   made and dropped for 20 schedules of 1 ms), rich.progress imported only when a bar shows
   (30 ms of every explore's start).

After the changes, 3 rounds at load average 2.3 (whole process s, steady ms/perm, its CPU ms):
pair: isolationtester 0.193 s, 7.8 ms, 0.14 ms; explore 0.68-0.80 s (3.5-4.2x; 0.85-1.0x of
isolationtester with a fresh database, 0.80 s), 1.15 ms (0.15x), 0.51 ms; fixed 520-650 ms
against 37. mixed: isolationtester 1.54 s, 7.3 ms; explore 1.69-1.87 s (1.09-1.21x), 7.6 ms
(1.05x), 1.0 ms CPU. lease: isolationtester 0.58 s, 6.2 ms; explore 1.28-1.41 s (2.2-2.4x),
6.9 ms (1.12x). Before against after, 5 rounds interleaved at load average 4.0-4.5: pair
whole process 1.19 -> 0.55 s, steady 17.8 -> 5.4 ms (isolationtester 12.2); mixed 4.76 ->
3.82 s; the writing specs' steady state, one sample a round, moved 9-16 ms between runs,
and interleaved A/B runs of the in-process phases showed no change but the resets' 0.2 ms.
Goals met: read-only specs' steady state (0.15-0.44x). Not met: the whole process (our
scratch database alone costs more than isolationtester's whole run of a small spec), and
a writing spec's steady state (the restore is as dear as isolationtester's setup).

Round of 2026-12-05 (`run FILE.spec`, the spec itself, beside explore's equivalent scenarios):
- the server's description, the sweep for leftovers and the run's admin connection share one
  connection (two backends fewer to start), the sweep's two catalog reads are one, and a
  spec's run on PostgreSQL opens no wait monitor (isolationtester's own question is asked; the
  monitor's warm-up was four queries on a new database's cold catalog); on an embedded server
  the scratch database is not dropped before the server is (DROP DATABASE waits for a
  checkpoint, and the immediate shutdown that follows deletes it anyway). A one-permutation
  spec, farm-bench, 20 pairs at load average 0.5: --dsn 224 vs 234 ms (0.95), embedded 529
  vs 573 ms (0.98). Each session's SET application_name (isolationtester's name for it, for
  specs that look themselves up) costs a round trip back.
- tried and left out: dropping the scratch database from a detached process after the output
  (0.86-0.91 of the one-permutation run under load): the command would return while its
  database still exists, and a script that drops the DSN's role next (our own test did) fails.
- the whole process stays above isolationtester's: 210 permutations 1.63 s against 0.95 s
  (1.68x). Our fixed cost (Python and psycopg 0.12 s, a scratch database and a role) is
  isolationtester's tenfold, and the DROP DATABASE at the end waits for a checkpoint that
  unlinks every table file the permutations' teardowns dropped (PostgreSQL unlinks them at
  the next checkpoint): 0.2 s after 210 permutations (pyinstrument), a cost isolationtester
  leaves to a later checkpoint. Per permutation the server's work is the same (a bare
  psycopg loop of the same statements: 4.4 ms, as isolationtester's); our client adds 1 ms
  of CPU. With a database made and dropped around isolationtester, as ours is, 1.08x
  (3 rounds, load 1-3).

Second round of 2026-12-05 (the server slower all day: isolationtester's own figures 1.3-1.9x
the last round's, a CREATE DATABASE 66-190 ms against 30 ms after the machine started):
- libpq called through ctypes (engine/postgresql/libpq.py) instead of psycopg, whose import was
  110-130 ms of every start (asyncio, importlib.metadata for its version, every adapter): 7-9 ms.
  A statement costs more CPU through ctypes (about 100 us against psycopg's 75, a SELECT of one
  row, in a loop), and the process 0.73-0.83x the CPU. A/B against the session's start
  (farm-bench, 8 pairs, the 90-permutation spec): `run FILE.spec` 0.88-0.97x the wall time,
  explore 0.98x.
- start-up imports: PyYAML when a YAML file is read (15-20 ms; a .spec never needs it), the spec
  reader's identifier pattern as a negated class (its U+10FFFF range took 13 ms to compile).
- a retry's look at a waiting step decides at 2 ms where nothing can change before
  isolationtester's look at 10 ms (every other statement in flight waits for a lock too), for
  specs that set no timeout: PostgreSQL's own blocking specs 0.65-0.83 s -> 0.50-0.65 s a run
  (lock-committed-keyupdate, lock-update-delete, classroom-scheduling), outputs unchanged.
  isolationtester spends 10 ms on each look at a blocked step: on those specs our time per
  permutation is under half of its (14 against 33 ms on lock-committed-keyupdate).
- `verify` of several specs runs them in one process and one scratch database, as
  pg_isolation_regress runs PostgreSQL's in one database: bench/bench_spec_corpus.py, 43 of
  PostgreSQL 15's specs, 6.0 s against isolationtester's 7.1 s (0.85x).
- after all of it, 3 rounds: 20 permutations 0.56 s (isolationtester 0.12), 90: 1.19 s (0.70),
  210: 2.99 s (1.73); the fixed cost is now a Python process (about 0.12 s with typer, which
  alone is 25 ms) and the server's CREATE DATABASE (30-190 ms here), a role, the connections.
- tried and left out: setuptools' "compat" editable install (a path in a .pth instead of an
  import hook, 12 ms of every start in a checkout): setuptools calls that mode transitional.

Third round of 2026-12-05 (where the rest goes; bench/NOTES.md, "A scratch database's cost is
the file system's"): `perf record` on the server's backend puts 52-70 % of a slow CREATE
DATABASE, and of a CREATE TABLE in a database just made, in ext4's inode allocator, which
scans past every inode of its block group freed in the last minute(s); each scratch
database dropped frees 299. A CREATE DATABASE took 27-36 ms after a quiet minute, 300 ms
after a benchmark's minutes; the bench specs' CREATE TABLE 4.7-5.0 ms in a new database
against 2.1 ms in isolationtester's older one, so a writing permutation of ours costs
twice its. Unchanged by wal_compression or the FILE_COPY strategy. After it, 3 rounds on a
quiet machine: 20 permutations 0.30 s (isolationtester 0.07, 0.34 with a fresh db), 90:
1.04 s (0.49, 0.81), 210: 1.94 s (1.60, 1.94). `explore FILE.spec --jobs N` now runs a
spec's permutations on N scratch databases once the space outweighs opening one (1,950
permutations with faults: 13.1 s on one runner, 8.7-8.9 s on three).

Fourth round (a floor row, and what is left): `floor: python, CLI imported` is an interpreter
that imports the CLI (typer among it) and does nothing: 53-55 ms, 2.3-3.0x isolationtester's
whole one-permutation run (18-25 ms), before a spec is read or a server asked anything. A
one-permutation spec, 10 pairs: ours 139 ms, isolationtester 19 ms; with a database made and
dropped around it, as ours makes its scratch database, 101 ms (1.37x). In-process, the rest
of ours: CREATE DATABASE 24 ms quiet (105 ms after a benchmark's churn), DROP DATABASE 14 ms
(109 ms), the spec's own work 20 ms. The writing specs' steady state is the restore's, and
the restore is the server's work that isolationtester's setup also does; a cheaper one that
keeps the rows' ctids (DELETE, VACUUM, INSERT; bench/bench_pg_reset.py) saves 10 % and
changes the planner's estimates, so it is not used. After it, 3 rounds at load average 0.2:
20 permutations: run 0.44 s, explore 0.27 s (isolationtester 0.11, 0.23 with a fresh db);
90: 0.87 s, 0.86 s (0.58, 0.85); 210: 1.70 s, 1.46 s (1.33, 1.51). Read-only steady state
0.34x; writing 1.00-1.11x.

Usage: python bench/bench_spec_vs_isolationtester.py [--rounds 3] [--quick]
       [--dsn postgresql://root@127.0.0.1:5432/test] [--isolationtester PATH] [--before DIR]
--before DIR: another checkout (e.g. `git archive main | tar -x -C DIR`), measured in the same
rounds, for a change's figures before and after.
--quick: one round of the 20-permutation spec only (tests/test_bench_scripts.py runs it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPECS = sorted((ROOT / "bench" / "specs").glob("*.spec"))
QUICK_SPEC = ROOT / "bench" / "specs" / "skip-locked-pair.spec"
STEP = re.compile(r"^\s*step\s+(\w+)", re.MULTILINE)
PERMUTATION = re.compile(r"^starting permutation:", re.MULTILINE)


def ours_input(spec: Path) -> Path:
    """What our side is given for a spec: its equivalent scenario, until .spec files are read."""
    return spec.with_suffix(".yaml")


def find_isolationtester() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/lib/pgxs/src/test/isolation/isolationtester"))
    return found[-1] if found else None


def one_permutation(spec: Path, folder: str) -> Path:
    """The spec with one `permutation` line: every step of the first session, then the next's,
    the order isolationtester and explore both run first."""
    text = spec.read_text()
    one = Path(folder) / f"one-{spec.name}"
    one.write_text(f"{text}\npermutation {' '.join(STEP.findall(text))}\n")
    return one


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(command: list[str], stdin: Path | None = None, cwd: Path | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    with open(stdin or os.devnull, "rb") as given:
        done = subprocess.run(command, stdin=given, capture_output=True, text=True, check=False, cwd=cwd)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return elapsed, done.stdout


class Isolationtester:
    def __init__(self, binary: str, dsn: str):
        from jobqueue_demo.engine.postgresql.control import execute
        from jobqueue_demo.engine.postgresql.server import parse_dsn

        self.execute = execute
        self.params = parse_dsn(dsn)
        self.admin = self.params.connect()
        self.database = f"jqdtest_{os.urandom(4).hex()}"
        self.execute(self.admin, f'CREATE DATABASE "{self.database}"')
        self.binary = binary

    def conninfo(self, database: str) -> str:
        host = self.params.socket_dir or self.params.host
        return f"dbname={database} host={host} port={self.params.port} user={self.params.user}"

    def run(self, spec: Path, permutations: int) -> tuple[float, float]:
        """Seconds, whole process, and of them isolationtester's own CPU."""
        cpu = children_cpu_s()
        elapsed, out = timed([self.binary, self.conninfo(self.database)], stdin=spec)
        ran = len(PERMUTATION.findall(out))
        assert ran == permutations, f"isolationtester ran {ran} permutations of {spec.name}, not {permutations}"
        return elapsed, children_cpu_s() - cpu

    def run_fresh(self, spec: Path, permutations: int) -> float:  # whole process only
        """As compare-isolationtester does: a database made for the run, dropped after it."""
        database = f"jqdtest_{os.urandom(4).hex()}"
        started = time.perf_counter()
        self.execute(self.admin, f'CREATE DATABASE "{database}"')
        try:
            _, out = timed([self.binary, self.conninfo(database)], stdin=spec)
        finally:
            self.execute(self.admin, f'DROP DATABASE "{database}"')
        assert len(PERMUTATION.findall(out)) == permutations
        return time.perf_counter() - started

    def close(self) -> None:
        self.execute(self.admin, f'DROP DATABASE IF EXISTS "{self.database}"')
        self.admin.close()


def ours(spec: Path, dsn: str, permutations: int, *options: str, checkout: Path = ROOT) -> float:
    """`python -m jobqueue_demo` run in `checkout`, so that its package is the one imported."""
    command = [sys.executable, "-m", "jobqueue_demo", "explore", str(ours_input(spec)), "--dsn", dsn, "--json", *options]
    elapsed, out = timed(command, cwd=checkout)
    report = json.loads(out)
    assert report["explored"] == permutations and not report["findings"], (spec.name, report["explored"], report["findings"])
    return elapsed


def ours_run(spec: Path, dsn: str, permutations: int) -> float:
    """`jobqueue-demo run FILE.spec --format isolationtester`: the spec itself, every permutation
    as isolationtester runs them, its output the same."""
    command = [sys.executable, "-m", "jobqueue_demo", "run", str(spec), "--dsn", dsn, "--format", "isolationtester"]
    elapsed, out = timed(command, cwd=ROOT)
    assert len(PERMUTATION.findall(out)) == permutations, (spec.name, len(PERMUTATION.findall(out)))
    return elapsed


# Explore's steady state: one runner's schedules, timed from its first to its last, in a
# process of its own started in the checkout measured (python -c imports from there; api.server
# is the same before and after engine/ was split into packages).
STEADY = """
import sys, time
from jobqueue_demo import api
from jobqueue_demo.explore.search import DepthFirst, ExploreOptions, ScheduleRunner, Space
with api.server(sys.argv[2]) as server:
    scenario = api.for_server(api.load(sys.argv[1]), server)
    with ScheduleRunner(Space(scenario, ()), server, ExploreOptions(jobs=1)) as runner:
        source, count = DepthFirst(None), 0
        started, cpu = time.perf_counter(), time.process_time()
        while (chooser := source.take()) is not None:
            source.done(chooser, runner.run(chooser))
            count += 1
        print(count, (time.perf_counter() - started) / count, (time.process_time() - cpu) / count)
"""


def steady(spec: Path, dsn: str, permutations: int, checkout: Path = ROOT) -> tuple[float, float]:
    """Seconds per schedule once explore's runner is open, and of them our process's CPU."""
    _, out = timed([sys.executable, "-c", STEADY, str(ours_input(spec)), dsn], cwd=checkout)
    count, per_s, cpu_s = out.split()
    assert int(count) == permutations, (spec.name, count)
    return float(per_s), float(cpu_s)


def spec_size(spec: Path, binary: str, tester: Isolationtester) -> int:
    """How many permutations isolationtester runs for the spec (every order of its steps)."""
    _, out = timed([binary, tester.conninfo(tester.database)], stdin=spec)
    return len(PERMUTATION.findall(out))


ANCHOR = "isolationtester (anchor)"
FRESH = "isolationtester + fresh db"
FLOOR = "floor: python, CLI imported"


def floor() -> float:
    """What any run of ours costs before it reads its spec: the interpreter, and the CLI's
    modules (typer among them) imported, nothing else."""
    return timed([sys.executable, "-c", "import jobqueue_demo.cli.main"], cwd=ROOT)[0]


def measure(
    spec: Path, tester: Isolationtester, dsn: str, rounds: int, folder: str, before: Path | None = None
) -> dict[str, dict[str, float]]:
    """Per row: the whole process for every permutation (all_s), and seconds per permutation
    in the steady state (per_s), with the CPU our process, or isolationtester's, spent in it
    (cpu_s: what the client does, beside the server's work and the waits). isolationtester's
    per_s is (all - one) / (N - 1); ours is measured in its steady state itself. fixed_s: a
    one-permutation run less per_s."""
    size = spec_size(spec, tester.binary, tester)
    one = one_permutation(spec, folder)
    checkouts = {"": ROOT, **({" (--before)": before} if before is not None else {})}
    runs = {
        ANCHOR: {"all": lambda: tester.run(spec, size), "one": lambda: tester.run(one, 1)},
        FRESH: {"all": lambda: tester.run_fresh(spec, size)},
        FLOOR: {"all": floor},
    }
    runs["run FILE.spec"] = {"all": lambda: ours_run(spec, dsn, size)}
    for label, checkout in checkouts.items():
        runs[f"explore{label}"] = {
            "all": lambda c=checkout: ours(spec, dsn, size, checkout=c),
            "one": lambda c=checkout: ours(spec, dsn, 1, "--max-schedules", "1", checkout=c),
            "per": lambda c=checkout: steady(spec, dsn, size, c),
        }
        runs[f"explore --jobs 1{label}"] = {
            "all": lambda c=checkout: ours(spec, dsn, size, "--jobs", "1", checkout=c),
            "one": lambda c=checkout: ours(spec, dsn, 1, "--jobs", "1", "--max-schedules", "1", checkout=c),
        }
    times = {name: {what: [] for what in kinds} for name, kinds in runs.items()}
    for _ in range(rounds):
        for name, kinds in runs.items():
            for what, run in kinds.items():
                got = run()
                times[name][what].append(got if isinstance(got, tuple) else (got, float("nan")))
    out: dict[str, dict[str, float]] = {"permutations": {"n": size}}
    for name, kinds in times.items():
        wall = {what: statistics.median(w for w, _ in values) for what, values in kinds.items()}
        cpu = {what: statistics.median(c for _, c in values) for what, values in kinds.items()}
        if name.startswith("explore --jobs 1"):  # one runner's steady state, measured above
            wall["per"], cpu["per"] = out[name.replace(" --jobs 1", "")]["per_s"], float("nan")
        elif "per" not in wall:
            wall["per"] = (wall["all"] - wall["one"]) / (size - 1) if "one" in wall else float("nan")
            cpu["per"] = (cpu["all"] - cpu["one"]) / (size - 1) if "one" in cpu else float("nan")
        fixed = wall["one"] - wall["per"] if "one" in wall else float("nan")
        out[name] = {"all_s": wall["all"], "per_s": wall["per"], "cpu_s": cpu["per"], "fixed_s": fixed}
    return out


def report(spec: Path, figures: dict, rounds: int) -> None:
    size = figures["permutations"]["n"]
    print(f"{spec.name}: {size} permutations, median of {rounds} interleaved round(s)")
    print(f"  {'':32s} {'whole process, s':>17s} {'steady, ms/perm':>16s} {'its CPU, ms':>12s} {'fixed, ms':>10s}")
    for name, row in figures.items():
        if name != "permutations":
            print(
                f"  {name:32s} {row['all_s']:17.3f} {row['per_s'] * 1000:16.2f} {row['cpu_s'] * 1000:12.2f} "
                f"{row['fixed_s'] * 1000:10.0f}"
            )
    anchor, fresh = figures[ANCHOR], figures[FRESH]
    print(
        f"  {FLOOR} / isolationtester: {figures[FLOOR]['all_s'] / anchor['all_s']:5.2f} of its whole run, "
        f"{figures[FLOOR]['all_s'] / (anchor['fixed_s'] + anchor['per_s']):5.2f} of its one-permutation run"
    )
    for name, row in figures.items():
        if not name.startswith(("explore", "run")):
            continue
        whole = row["all_s"] / anchor["all_s"]
        steady_ratio = row["per_s"] / anchor["per_s"]
        steady_text = (
            f", steady state {steady_ratio:4.2f} (goal <= 0.5: {'met' if steady_ratio <= 0.5 else 'NOT met'})"
            if name.startswith("explore") else ""
        )
        print(
            f"  ratio {name:27s} / isolationtester: whole process {whole:5.2f} "
            f"(goal <= 1: {'met' if whole <= 1 else 'NOT met'}; {row['all_s'] / fresh['all_s']:4.2f} of it with a fresh db)"
            + steady_text
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of the 20-permutation spec")
    parser.add_argument("--dsn", default=os.environ.get("JOBQUEUE_DEMO_TEST_PG_DSN", "postgresql://root@127.0.0.1:5432/test"))
    parser.add_argument("--isolationtester", default=find_isolationtester())
    parser.add_argument("--before", type=Path, help="another checkout of jobqueue-demo, measured too (before a change)")
    args = parser.parse_args()
    if not args.isolationtester:
        raise SystemExit("no isolationtester (Debian's postgresql-15 ships it in pgxs)")
    specs, rounds = ([QUICK_SPEC], 1) if args.quick else (SPECS, args.rounds)
    tester = Isolationtester(args.isolationtester, args.dsn)
    try:
        with tempfile.TemporaryDirectory() as folder:
            for spec in specs:
                report(spec, measure(spec, tester, args.dsn, rounds, folder, args.before), rounds)
    finally:
        tester.close()


if __name__ == "__main__":
    main()
