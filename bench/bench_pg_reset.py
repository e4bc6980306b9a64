"""Explore's reset on PostgreSQL: which way back to the setup's rows is fastest.

Measured on the embedded PostgreSQL with the skip-locked lesson's table, after a schedule's
worth of changes, each way interleaved:

- TRUNCATE + INSERT ... SELECT from a copy (what engine/pg_snapshot.py does), one transaction;
- DELETE + INSERT ... SELECT from a copy (what MariaDB's reset does), one transaction;
- the anchor: drop the database and CREATE DATABASE ... TEMPLATE a copy made once, then
  reconnect the two sessions (PostgreSQL cannot drop a database with sessions in it).

Usage: python bench/bench_pg_reset.py [--rounds 30]
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


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with open_server(None, "postgresql") as server:
        seam = server.seam
        scratch = seam.scratch(server)
        scratch.open()
        try:
            user = seam.user_connection(scratch, 10.0)
            seam.run_script(user, SETUP)
            snapshot = seam.snapshot(scratch, ("jobs",), user)
            delete_sql = snapshot.restore_sql.replace("TRUNCATE public.\"jobs\"", "DELETE FROM public.\"jobs\"")
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

            figures: dict[str, list[float]] = {"truncate": [], "delete": [], "template": []}
            for _ in range(args.rounds):
                answer(user, CHANGES)
                figures["truncate"].append(timed(snapshot.restore))
                answer(user, CHANGES)
                figures["delete"].append(timed(lambda: execute(user, delete_sql)))
                answer(held[0], CHANGES)
                figures["template"].append(timed(recreate))
            rows = answer(user, "SELECT id, state FROM jobs ORDER BY id").rows
            assert rows == (("1", "queued"), ("2", "queued")), rows
            user.close()
            for conn in held:
                conn.close()
        finally:
            scratch.close()
        label = server.label
    medians = {k: statistics.median(v) * 1000 for k, v in figures.items()}
    print(f"explore reset on {label} (embedded), median of {args.rounds} interleaved rounds")
    print(f"  TRUNCATE + INSERT ... SELECT (used)          {medians['truncate']:8.2f} ms")
    print(f"  DELETE + INSERT ... SELECT                   {medians['delete']:8.2f} ms")
    print(f"  anchor: CREATE DATABASE ... TEMPLATE + 2 reconnects {medians['template']:8.2f} ms")
    print(f"  ratio used / anchor: {medians['truncate'] / medians['template']:.3f}")


if __name__ == "__main__":
    main()
