"""A corpus of isolation specs, each run by isolationtester and by `jobqueue-demo run FILE.spec
--format isolationtester`, whole processes, interleaved: both outputs checked, both timed.

The anchor, in the same run on the same server: PostgreSQL's own isolationtester (the one
Debian's postgresql-15 ships in pgxs), given a database made for it once, as
pg_isolation_regress gives it one. Ours makes its scratch database and per-run role every run,
as a user runs it (and isolationtester is also timed with a database made and dropped around
it, `+ fresh db`). Each spec's output must equal its expected file (`NAME.out` beside
`NAME.spec`, as PostgreSQL's src/test/isolation/expected keeps them) for both tools; a spec
without one is checked against isolationtester's output of the same round.

The corpus is a directory given on the command line: PostgreSQL's own specs stay outside the
project. With none, the project's own specs (scenarios/specs/*.spec, each with its NAME.out).

Per spec: the medians of each tool, their ratio; then the whole corpus: the sums, their ratio.
Beside them, `jobqueue-demo verify` given every spec at once (one process, one scratch database
and role for them all, as pg_isolation_regress runs every spec in one database): its time for
the corpus against the sum of isolationtester's, and its verdict on the expected outputs.

Usage: python bench/bench_spec_corpus.py [DIR] [--rounds 3] [--dsn postgresql://root@127.0.0.1:5432/test]
       [--isolationtester PATH] [--quick]
--quick: one round of the project's own specs, no fresh-db column (tests/test_bench_scripts.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_spec_vs_isolationtester import Isolationtester, find_isolationtester  # noqa: E402

# The project's own specs, each with the expected output isolationtester made (scenarios/specs/*.out).
OWN = sorted((ROOT / "scenarios" / "specs").glob("*.spec"))


def timed(command: list[str], stdin: Path | None, env: dict) -> tuple[float, str, int]:
    started = time.perf_counter()
    with open(stdin or os.devnull, "rb") as given:
        done = subprocess.run(command, stdin=given, capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - started, done.stdout, done.returncode


def env_for(spec: Path) -> dict:
    # pg_isolation_regress names the sessions so; a spec that looks itself up needs it, in both tools.
    return dict(os.environ, PGAPPNAME=f"isolation/{spec.stem}")


def ours(spec: Path, dsn: str) -> tuple[float, str]:
    command = [sys.executable, "-m", "jobqueue_demo", "run", str(spec), "--dsn", dsn, "--format", "isolationtester"]
    elapsed, out, _ = timed(command, None, env_for(spec))
    return elapsed, out


def theirs(tester: Isolationtester, spec: Path) -> tuple[float, str]:
    elapsed, out, _ = timed([tester.binary, tester.conninfo(tester.database)], spec, env_for(spec))
    return elapsed, out


def theirs_fresh(tester: Isolationtester, spec: Path) -> float:
    database = f"jqdtest_{os.urandom(4).hex()}"
    started = time.perf_counter()
    tester.execute(tester.admin, f'CREATE DATABASE "{database}"')
    try:
        timed([tester.binary, tester.conninfo(database)], spec, env_for(spec))
    finally:
        tester.execute(tester.admin, f'DROP DATABASE "{database}"')
    return time.perf_counter() - started


def verify_all(specs: list[Path], dsn: str) -> tuple[float, int, str]:
    """`jobqueue-demo verify` of every spec in one process: seconds, exit code, output."""
    command = [sys.executable, "-m", "jobqueue_demo", "verify", *map(str, specs), "--dsn", dsn]
    environment = {k: v for k, v in os.environ.items() if k != "PGAPPNAME"}  # verify names each spec's own
    elapsed, out, code = timed(command, None, environment)
    return elapsed, code, out


def expected_of(spec: Path) -> str | None:
    out = spec.with_suffix(".out")
    return out.read_text() if out.exists() else None


def measure(specs: list[Path], tester: Isolationtester, dsn: str, rounds: int, fresh: bool) -> dict:
    times: dict[str, dict[str, list[float]]] = {s.name: {"it": [], "ours": [], "fresh": []} for s in specs}
    wrong: list[str] = []
    verified: list[float] = []
    checked = all(s.with_suffix(".out").exists() for s in specs)
    for _ in range(rounds):
        took, code, out = verify_all(specs, dsn)
        verified.append(took)
        if code != 0 and checked:
            wrong.append("verify of the corpus: " + " | ".join(line for line in out.splitlines() if "differs" in line)[:400])
        for spec in specs:
            it_s, it_out = theirs(tester, spec)
            our_s, our_out = ours(spec, dsn)
            expected = expected_of(spec) or it_out
            for who, out in (("isolationtester", it_out), ("jobqueue-demo", our_out)):
                if out != expected:
                    wrong.append(f"{spec.name}: {who}'s output differs from the expected")
            times[spec.name]["it"].append(it_s)
            times[spec.name]["ours"].append(our_s)
            if fresh:
                times[spec.name]["fresh"].append(theirs_fresh(tester, spec))
    return {"times": times, "wrong": wrong, "verify": statistics.median(verified), "checked": checked}


def report(specs: list[Path], figures: dict, rounds: int) -> None:
    times = figures["times"]
    print(f"{len(specs)} specs, median of {rounds} interleaved round(s), whole process, seconds")
    print(f"  {'spec':34s} {'perms':>5s} {'isolationtester':>16s} {'+ fresh db':>11s} {'jobqueue-demo':>14s} {'ratio':>6s}")
    sums = {"it": 0.0, "ours": 0.0, "fresh": 0.0}
    for spec in specs:
        row = {k: statistics.median(v) if v else float("nan") for k, v in times[spec.name].items()}
        for k in sums:
            sums[k] += row[k]
        perms = (spec.with_suffix(".out").read_text().count("starting permutation:")
                 if spec.with_suffix(".out").exists() else 0)
        print(f"  {spec.name:34s} {perms or '':>5} {row['it']:16.3f} {row['fresh']:11.3f} {row['ours']:14.3f} "
              f"{row['ours'] / row['it']:6.2f}")
    print(f"  {'all':34s} {'':5s} {sums['it']:16.3f} {sums['fresh']:11.3f} {sums['ours']:14.3f} "
          f"{sums['ours'] / sums['it']:6.2f}")
    met = sums["ours"] <= sums["it"]
    print(f"ratio jobqueue-demo / isolationtester, the corpus: {sums['ours'] / sums['it']:.2f} "
          f"(goal <= 1: {'met' if met else 'NOT met'})"
          + (f"; {sums['ours'] / sums['fresh']:.2f} of isolationtester with a fresh db" if sums["fresh"] == sums["fresh"] and sums["fresh"] else ""))
    verify = figures["verify"]
    print(f"jobqueue-demo verify, every spec in one process: {verify:.3f} s"
          + (" (each output equal to its expected file)" if figures["checked"] and not figures["wrong"] else ""))
    print(f"ratio jobqueue-demo verify / isolationtester, the corpus: {verify / sums['it']:.2f} "
          f"(goal <= 1: {'met' if verify <= sums['it'] else 'NOT met'})")
    for line in figures["wrong"]:
        print(f"OUTPUT DIFFERS: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, help="a directory of NAME.spec (and NAME.out) files")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of the project's own specs")
    parser.add_argument("--dsn", default=os.environ.get("JOBQUEUE_DEMO_TEST_PG_DSN", "postgresql://root@127.0.0.1:5432/test"))
    parser.add_argument("--isolationtester", default=find_isolationtester())
    args = parser.parse_args()
    if not args.isolationtester:
        raise SystemExit("no isolationtester (Debian's postgresql-15 ships it in pgxs)")
    specs = sorted(args.corpus.glob("*.spec")) if args.corpus else OWN
    if not specs:
        raise SystemExit(f"no .spec file in {args.corpus}")
    rounds = 1 if args.quick else args.rounds
    tester = Isolationtester(args.isolationtester, args.dsn)
    try:
        figures = measure(specs, tester, args.dsn, rounds, fresh=not args.quick)
    finally:
        tester.close()
    report(specs, figures, rounds)
    if figures["wrong"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
