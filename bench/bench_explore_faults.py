"""explore with faults: the disconnect fault per schedule against the rollback fault, and
the whole space of the broken and the correct recipe with both faults.

Anchor, in the same run on the same server: the rollback fault's schedules/s on the broken
recipe (claim-without-lock-explore). Goal: disconnect within 2x of it per schedule
(it ran at 4/s against 273/s while a disconnect of a session waiting for a lock waited for
the server to notice, which InnoDB does only when the wait ends).

Also printed, with the goals from issue 17:
  * `explore claim-without-lock-explore --faults rollback,disconnect`: the whole space, the
    double claim found, within 60 s;
  * `explore skip-locked-explore --faults rollback,disconnect`: 0 invariants violated.

    .venv/bin/python bench/bench_explore_faults.py [--rounds 3] [--dsn mysql://root@127.0.0.1:3306/test | --embedded]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobqueue_demo import api as core  # noqa: E402
from jobqueue_demo.engine.seam import open_server  # noqa: E402
from jobqueue_demo.explore.search import ExploreOptions, explore  # noqa: E402

BROKEN = "claim-without-lock-explore"
CORRECT = "skip-locked-explore"


def whole_space(scenario, server, faults: tuple[str, ...]):
    report = explore(scenario, server, ExploreOptions(faults=faults, jobs=2))
    assert report.complete, "the whole space was not run"
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default="mysql://root@127.0.0.1:3306/test")
    parser.add_argument("--embedded", action="store_true", help="use a private throwaway server instead of --dsn")
    args = parser.parse_args()
    broken, correct = core.load(BROKEN), core.load(CORRECT)
    rollback, disconnect, both, clean = [], [], [], []
    with open_server(None if args.embedded else args.dsn) as server:
        for _ in range(args.rounds):
            rollback.append(whole_space(broken, server, ("rollback",)))
            disconnect.append(whole_space(broken, server, ("disconnect",)))
            both.append(whole_space(broken, server, ("rollback", "disconnect")))
            clean.append(whole_space(correct, server, ("rollback", "disconnect")))
        label = server.label
    r = statistics.median(x.per_second for x in rollback)
    d = statistics.median(x.per_second for x in disconnect)
    whole_s = statistics.median(x.elapsed_s for x in both)
    double = all(any(f.what == "no job done twice" for f in x.findings) for x in both)
    violated = max(x.counts["violated"] for x in clean)
    print(f"explore with faults, {label}, --jobs 2, {args.rounds} rounds, medians")
    print(f"  {BROKEN} --faults rollback (anchor)     {r:8.1f} schedules/s ({rollback[0].explored} schedules)")
    print(f"  {BROKEN} --faults disconnect            {d:8.1f} schedules/s ({disconnect[0].explored} schedules)")
    print(f"  ratio: rollback / disconnect per schedule   {r / d:6.2f}   (goal: <= 2: {'met' if r / d <= 2 else 'NOT met'})")
    print(
        f"  {BROKEN} --faults rollback,disconnect, whole space ({both[0].explored} schedules): {whole_s:.1f} s, "
        f"double claim found: {'yes' if double else 'NO'}   (goal: <= 60 s: {'met' if whole_s <= 60 and double else 'NOT met'})"
    )
    print(
        f"  {CORRECT} --faults rollback,disconnect ({clean[0].explored} schedules): invariant violated {violated}   "
        f"(goal: 0: {'met' if violated == 0 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
