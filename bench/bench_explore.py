"""Schedules per second of `explore` on the seed-sized lesson, against a plain run of it.

The anchor, in the same run on the same server: one plain `Run` of the same scenario (the
seed schedule in file order, with its own scratch database and connections), which is what
running every schedule as a separate `jobqueue-demo run` would cost at best. The ratio says
how many explored schedules fit in the time of one plain run. Goal: >= 50 schedules/s.

Also measured, to back two choices made in explore.py:
  * the reset between schedules: the snapshot restore explore uses, TRUNCATE + re-insert,
    and dropping and re-creating the database from setup (explore's fallback, end to end);
  * parallel workers (--jobs) on this machine.

Rounds are interleaved so drift in the machine's load hits every variant alike; medians.

    /tmp/v/bin/python bench/bench_explore.py [--rounds 5] [--dsn mysql://root@127.0.0.1:3306/test | --embedded]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobqueue_demo import api as core  # noqa: E402
from jobqueue_demo.engine.seam import open_server  # noqa: E402
from jobqueue_demo.explore.search import ExploreOptions, ScheduleRunner, Space, explore  # noqa: E402
from jobqueue_demo.run.driver import Run  # noqa: E402

SCENARIO = ROOT / "scenarios" / "skip-locked-explore.yaml"
RESETS = 200


def plain_run_s(scenario, server) -> float:
    started = time.perf_counter()
    for _ in Run(scenario, server).events():
        pass
    return time.perf_counter() - started


def explore_rate(scenario, server, **options) -> float:
    report = explore(scenario, server, ExploreOptions(**options))
    assert report.complete and report.counts["ok"] == report.explored, report.counts
    return report.per_second


def reset_ms(scenario, server, statement: str | None) -> float:
    """One reset of the tables after setup: the snapshot restore, or `statement` with {db}."""
    with ScheduleRunner(Space(scenario, ()), server, ExploreOptions()) as worker:
        sql = statement.format(db=worker.driver.database) if statement else None
        started = time.perf_counter()
        for _ in range(RESETS):
            if sql is None:
                worker.reset()
            else:
                worker.driver.conns.execute(sql)
        return (time.perf_counter() - started) * 1000.0 / RESETS


def session_reset_ms(server, how: str) -> float:
    conn = server.params.connect(database="mysql")
    started = time.perf_counter()
    for _ in range(RESETS):
        if how == "connect":
            server.params.connect(database="mysql").close()
        else:
            conn.change_user(server.params.user, server.params.password, "mysql")
    conn.close()
    return (time.perf_counter() - started) * 1000.0 / RESETS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dsn", default="mysql://root@127.0.0.1:3306/test")
    parser.add_argument("--embedded", action="store_true", help="use a private throwaway server instead of --dsn")
    args = parser.parse_args()
    scenario = core.load(str(SCENARIO))
    truncate = (
        "TRUNCATE `{db}`.jobs; INSERT INTO `{db}`.jobs (id, task) VALUES (1, 'send welcome email'), (2, 'generate invoice')"
    )
    with open_server(None if args.embedded else args.dsn) as server:
        rows: dict[str, list[float]] = {
            "plain run of the scenario (anchor), ms": [],
            "explore --jobs 1, schedules/s": [],
            "explore --jobs 2, schedules/s": [],
            "explore --jobs 3, schedules/s": [],
            "explore --jobs 1, rebuild reset, schedules/s": [],
            "reset: snapshot restore (chosen), ms": [],
            "reset: TRUNCATE + INSERT, ms": [],
            "sessions: COM_CHANGE_USER (chosen), ms": [],
            "sessions: new connection, ms": [],
        }
        values = list(rows.values())
        for _ in range(args.rounds):
            values[0].append(plain_run_s(scenario, server) * 1000.0)
            values[1].append(explore_rate(scenario, server, jobs=1))
            values[2].append(explore_rate(scenario, server, jobs=2))
            values[3].append(explore_rate(scenario, server, jobs=3))
            values[4].append(explore_rate(scenario, server, jobs=1, recreate=True))
            values[5].append(reset_ms(scenario, server, None))
            values[6].append(reset_ms(scenario, server, truncate))
            values[7].append(session_reset_ms(server, "change_user"))
            values[8].append(session_reset_ms(server, "connect"))
        label = server.label
    median = {k: statistics.median(v) for k, v in rows.items()}
    print(f"explore on {SCENARIO.name} ({Space(scenario, ()).bound()} schedules), {label}, {args.rounds} rounds, medians")
    for name, value in median.items():
        print(f"  {name:48s} {value:8.2f}")
    anchor_ms = median["plain run of the scenario (anchor), ms"]
    for jobs in (1, 2):
        rate = median[f"explore --jobs {jobs}, schedules/s"]
        print(
            f"  ratio: --jobs {jobs} schedules in the time of one plain run  {rate * anchor_ms / 1000.0:6.2f}"
            f"   (goal: >= 50 schedules/s: {'met' if rate >= 50 else 'NOT met'})"
        )
    print(
        f"  ratio: snapshot reset speed-up over rebuild (end to end)   "
        f"{median['explore --jobs 1, schedules/s'] / median['explore --jobs 1, rebuild reset, schedules/s']:6.2f}"
    )


if __name__ == "__main__":
    main()
