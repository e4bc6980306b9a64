"""Explore's reset on PostgreSQL: which way back to the setup's rows is fastest.

Measured on the embedded PostgreSQL (or --dsn's) with the skip-locked lesson's table, after a
schedule's worth of changes, each way interleaved:

- TRUNCATE + INSERT ... SELECT from a copy (what engine/postgresql/snapshot.py does), one transaction;
- DELETE + INSERT ... SELECT from a copy (what MariaDB's reset does), one transaction;
- DELETE, VACUUM, then INSERT ... SELECT: VACUUM frees every line pointer and truncates the
  emptied file, so the rows come back at setup's ctids, without TRUNCATE's new files. Its cost
  is fidelity: VACUUM records reltuples = 0, where a table setup just made (or TRUNCATE
  emptied) has -1, "never counted", for which the planner assumes 10 pages. The planner's
  estimates, so the plans and the order rows are locked in, are no longer isolationtester's;
  the script prints a plan under both;
- the anchor: drop the database and CREATE DATABASE ... TEMPLATE a copy made once, then
  reconnect the two sessions (PostgreSQL cannot drop a database with sessions in it).

Usage: python bench/bench_pg_reset.py [--rounds 30] [--dsn postgresql://root@127.0.0.1:5432/test]
(without --dsn: the embedded server)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobqueue_demo.engine.postgresql.control import execute  # noqa: E402
from jobqueue_demo.engine.postgresql.session import answer  # noqa: E402
from jobqueue_demo.engine.seam import open_server  # noqa: E402

SETUP = """
CREATE TABLE jobs (id INT PRIMARY KEY, task VARCHAR(100) NOT NULL, state VARCHAR(20) NOT NULL DEFAULT 'queued');
INSERT INTO jobs (id, task) VALUES (1, 'send welcome email'), (2, 'generate invoice');
"""
CHANGES = "UPDATE jobs SET state = 'done' WHERE id = 1; INSERT INTO jobs (id, task) VALUES (3, 'x')"
PLANNED = "EXPLAIN (COSTS OFF) UPDATE jobs SET state = 'done' WHERE id = 1"
LAYOUT = "SELECT ctid, id FROM jobs ORDER BY id"


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--dsn", help="a PostgreSQL server of your own; its scratch databases are dropped after")
    args = parser.parse_args()
    with open_server(args.dsn, "postgresql") as server:
        seam = server.seam
        scratch = seam.scratch(server)
        scratch.open()
        try:
            user = seam.user_connection(scratch, 10.0)
            seam.run_script(user, SETUP)
            snapshot = seam.snapshot(scratch, ("jobs",), user)
            delete_sql = snapshot.restore_sql.replace("TRUNCATE public.\"jobs\"", "DELETE FROM public.\"jobs\"")
            refill_sql = snapshot.restore_sql.split("; ", 2)[2]  # the INSERT ... SELECT and what follows
            fresh = (answer(user, LAYOUT).rows, answer(user, PLANNED).rows)

            def vacuumed() -> None:
                execute(user, 'DELETE FROM public."jobs"')
                execute(user, 'VACUUM public."jobs"')
                execute(user, refill_sql)

            template = scratch.name + "_t"
            copy = scratch.name + "_c"
            scratch.create_database(template)
            made = server.params.connect(database=template)
            seam.run_script(made, SETUP)
            made.close()
            scratch.create_database(copy, template=template)

            def sessions(database: str):
                return [server.params.connect(database=database) for _ in range(2)]

            held = sessions(copy)

            def recreate() -> None:
                for conn in held:
                    conn.close()
                scratch.drop(copy)
                scratch.create_database(copy, template=template)
                held[:] = sessions(copy)

            figures: dict[str, list[float]] = {"truncate": [], "delete": [], "vacuum": [], "template": []}
            for _ in range(args.rounds):
                answer(user, CHANGES)
                figures["truncate"].append(timed(snapshot.restore))
                answer(user, CHANGES)
                figures["delete"].append(timed(lambda: execute(user, delete_sql)))
                answer(user, CHANGES)
                figures["vacuum"].append(timed(vacuumed))
                after_vacuum = (answer(user, LAYOUT).rows, answer(user, PLANNED).rows)
                answer(held[0], CHANGES)
                figures["template"].append(timed(recreate))
            snapshot.restore()
            truncated = (answer(user, LAYOUT).rows, answer(user, PLANNED).rows)
            rows = answer(user, "SELECT id, state FROM jobs ORDER BY id").rows
            assert rows == (("1", "queued"), ("2", "queued")), rows
            assert truncated == fresh, (truncated, fresh)
            user.close()
            for conn in held:
                conn.close()
        finally:
            scratch.close()
        label = server.label
    medians = {k: statistics.median(v) * 1000 for k, v in figures.items()}
    print(f"explore reset on {label} ({'--dsn' if args.dsn else 'embedded'}), median of {args.rounds} interleaved rounds")
    print(f"  TRUNCATE + INSERT ... SELECT (used)          {medians['truncate']:8.2f} ms")
    print(f"  DELETE + INSERT ... SELECT                   {medians['delete']:8.2f} ms")
    print(f"  DELETE, VACUUM, INSERT ... SELECT            {medians['vacuum']:8.2f} ms")
    for label_, (layout, plan) in (("after setup or TRUNCATE", fresh), ("after DELETE, VACUUM", after_vacuum)):
        print(f"    {label_}: ctids {' '.join(r[0] for r in layout)}; UPDATE ... WHERE id = 1: {' / '.join(r[0].strip() for r in plan)}")
    print(f"  anchor: CREATE DATABASE ... TEMPLATE + 2 reconnects {medians['template']:8.2f} ms")
    print(f"  ratio used / anchor: {medians['truncate'] / medians['template']:.3f}")


if __name__ == "__main__":
    main()
