"""Makes the deadlock reports from real deadlocks on embedded servers: the shipped examples
in reports/ (`jobqueue-demo replay NAME`) and their other forms in tests/reports/.

Run from the repository: `.venv/bin/python tests/reports/make_reports.py`. Each report is what
an engineer would paste from production: the MariaDB monitor's output
(SHOW ENGINE INNODB STATUS), the error log's deadlock (innodb_print_all_deadlocks), the
PostgreSQL server log's lines or the client's error. The statements run as root in a
database called `shop`, on the schemas and rows of reports/.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent.parent / "reports"

QUEUE_SCHEMA = (SHIPPED / "reserve-vs-delete.schema.sql").read_text()

# name: (rows, [(session, sql)], the statements that end blocked, in order); the shipped
# ones are written to reports/NAME.txt, the others to tests/reports/mariadb-NAME.txt.
MARIADB = {
    "claim-vs-enqueue": (
        "INSERT INTO jobs (id, task, state) VALUES (1, 'send welcome email', 'done'), (2, 'resize avatar', 'done');",
        [
            ("A", "BEGIN"),
            ("A", "SELECT id, task FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE"),
            ("B", "BEGIN"),
            ("B", "SELECT id FROM jobs WHERE state = 'queued' AND task = 'nightly report' FOR UPDATE"),
        ],
        [
            ("B", "INSERT INTO jobs (task, state) VALUES ('nightly report', 'queued')"),
            ("A", "INSERT INTO jobs (task, state) VALUES ('retry: resize avatar', 'queued')"),
        ],
    ),
    "reserve-vs-delete": (
        "INSERT INTO jobs (id, task, state) VALUES (1, 'send welcome email', 'done'), "
        "(4, 'resize avatar', 'queued'), (5, 'generate invoice', 'queued');",
        [
            ("B", "BEGIN"),
            ("B", "SELECT task FROM jobs WHERE id = 4 FOR UPDATE"),
            ("A", "BEGIN"),
        ],
        [
            ("A", "UPDATE jobs SET state = 'running' WHERE state = 'queued' ORDER BY id LIMIT 1"),
            ("B", "DELETE FROM jobs WHERE id = 4"),
        ],
    ),
    "claim-vs-insert": (
        "INSERT INTO jobs (id, task) VALUES (1, 'send welcome email');",
        [("A", "BEGIN"), ("A", "SELECT id FROM jobs WHERE state='queued' ORDER BY id LIMIT 1 FOR UPDATE"),
         ("B", "BEGIN"), ("B", "INSERT INTO jobs (task) VALUES ('send welcome email')")],
        [("B", "UPDATE jobs SET state='done' WHERE id = 1"),
         ("A", "SELECT id FROM jobs WHERE state='queued' AND id > 1 ORDER BY id LIMIT 1 FOR UPDATE")],
    ),
    "range-vs-insert": (
        "INSERT INTO jobs (id, task) VALUES (2, 'a'), (4, 'b'), (6, 'c'), (8, 'd');",
        [("A", "BEGIN"), ("A", "SELECT id FROM jobs WHERE id BETWEEN 3 AND 4 FOR UPDATE"),
         ("B", "BEGIN"), ("B", "SELECT id FROM jobs WHERE id = 8 FOR UPDATE")],
        [("A", "SELECT id FROM jobs WHERE id = 8 FOR UPDATE"), ("B", "INSERT INTO jobs (id, task) VALUES (3, 'x')")],
    ),
    "three-way": (
        "INSERT INTO jobs (id, task) VALUES (1, 'a'), (2, 'b'), (3, 'c');",
        [(s, sql) for s, n in (("A", 1), ("B", 2), ("C", 3))
         for sql in ("BEGIN", f"UPDATE jobs SET state='running' WHERE id={n}")],
        [("A", "UPDATE jobs SET state='done' WHERE id=2"), ("B", "UPDATE jobs SET state='done' WHERE id=3"),
         ("C", "UPDATE jobs SET state='done' WHERE id=1")],
    ),
}
SHIPPED_MARIADB = ("claim-vs-enqueue", "reserve-vs-delete")


def mariadb_reports() -> None:
    from jobqueue_demo.engine.mysql.embedded import ERROR_LOG_NAME
    from jobqueue_demo.engine.seam import seam_of

    seam = seam_of("mysql")
    for name, (rows, before, blocking) in MARIADB.items():
        with seam.embedded(("--innodb-print-all-deadlocks=ON",)) as info:
            root = info.params.connect(None)
            root.cursor().execute("CREATE DATABASE shop")
            root.cursor().execute("USE shop")
            root.cursor().execute(QUEUE_SCHEMA)
            root.cursor().execute(rows)
            sessions = {s: info.params.connect("shop") for s, _ in before + blocking}
            for session, sql in before:
                sessions[session].cursor().execute(sql)
            _blocking(sessions, blocking)
            cursor = root.cursor()
            cursor.execute("SHOW ENGINE INNODB STATUS")
            status = cursor.fetchall()[0][2]
            status = status.decode() if isinstance(status, bytes) else status
            time.sleep(0.5)  # the error log is written after the client hears of the deadlock
            log = (Path(info.params.unix_socket).parent / ERROR_LOG_NAME).read_text()
            for conn in [*sessions.values(), root]:
                conn.close()
        (SHIPPED / f"{name}.txt" if name in SHIPPED_MARIADB else HERE / f"mariadb-{name}.txt").write_text(status)
        start = log.find("Transactions deadlock detected")
        end = log.find("WE ROLL BACK TRANSACTION", start)
        begin = log.rfind("\n", 0, start) + 1
        (HERE / f"mariadb-{name}.errorlog.txt").write_text(log[begin: log.find("\n", end) + 1])


def _blocking(sessions, blocking, pause: float = 0.5) -> list:
    """Each statement in its own thread, a little apart, so the first waits before the second
    closes the cycle; the errors they ended with."""
    threads, errors = [], []
    for session, sql in blocking:
        def go(conn=sessions[session], sql=sql):
            try:
                conn.cursor().execute(sql)
            except Exception as exc:  # the victim's deadlock error
                errors.append(exc)
        thread = threading.Thread(target=go)
        thread.start()
        threads.append(thread)
        time.sleep(pause)
    for thread in threads:
        thread.join(10)
    return errors


PG_SCHEMA = (SHIPPED / "sharelock.schema.sql").read_text() + (SHIPPED / "sharelock.rows.sql").read_text()

PG_CLAIM = "SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
PG_DONE = "UPDATE jobs SET state = 'done' WHERE task = 'resize avatar of user 7'"


def postgresql_reports() -> None:
    """Two claimers that each mark every copy of a duplicated job done: a ShareLock cycle.
    The first waits past deadlock_timeout, so the log also has its "still waiting" lines."""
    from jobqueue_demo.engine.postgresql.embedded import LOG_NAME
    from jobqueue_demo.engine.seam import seam_of

    with seam_of("postgresql").embedded() as info:
        root = info.params.connect("postgres")
        root.execute("ALTER SYSTEM SET log_lock_waits = on")
        root.execute("ALTER SYSTEM SET deadlock_timeout = '200ms'")
        root.execute("SELECT pg_reload_conf()")
        root.execute("CREATE DATABASE shop")
        shop = info.params.connect("shop")
        shop.execute(PG_SCHEMA)
        sessions = {s: info.params.connect("shop") for s in ("A", "B")}
        for session in ("A", "B"):
            sessions[session].execute("BEGIN")
            sessions[session].execute(PG_CLAIM)
        errors = _blocking(sessions, [("A", PG_DONE), ("B", PG_DONE)], pause=0.6)
        log = (Path(info.params.socket_dir) / LOG_NAME).read_text()
        for conn in [*sessions.values(), shop, root]:
            conn.close()
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if "still waiting" in line)
    (SHIPPED / "sharelock.log").write_text("\n".join(lines[start:]) + "\n")
    error = errors[0]
    diag = error.diag
    client = (f"ERROR:  {diag.message_primary}\nDETAIL:  {diag.message_detail}\n"
              f"HINT:  {diag.message_hint}\nCONTEXT:  {diag.context}\n")
    (HERE / "postgresql-sharelock.client.txt").write_text(client)


PG_BIGSERIAL = ("CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'queued', "
                "run_at TIMESTAMPTZ NOT NULL DEFAULT now());\n")


def postgresql_lock_vs_update() -> None:
    """A claimer's SELECT … FOR UPDATE of a row another worker deleted, against that worker's
    UPDATE of the claimer's row: tests/reports/postgresql-lock-vs-update.log, its schema beside it."""
    from jobqueue_demo.engine.postgresql.embedded import LOG_NAME
    from jobqueue_demo.engine.seam import seam_of

    with seam_of("postgresql").embedded() as info:
        root = info.params.connect("postgres")
        root.execute("ALTER SYSTEM SET log_lock_waits = on")
        root.execute("SELECT pg_reload_conf()")
        root.execute("CREATE DATABASE shop")
        shop = info.params.connect("shop")
        shop.execute(PG_BIGSERIAL)
        shop.execute("INSERT INTO jobs (queue) VALUES ('mail'), ('mail'), ('sms')")
        sessions = {s: info.params.connect("shop") for s in ("A", "B")}
        sessions["A"].execute("BEGIN")
        sessions["A"].execute("SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
        sessions["B"].execute("BEGIN")
        sessions["B"].execute("DELETE FROM jobs WHERE id = 2")
        _blocking(sessions, [("A", "SELECT id FROM jobs WHERE id = 2 FOR UPDATE"),
                             ("B", "UPDATE jobs SET state = 'cancelled' WHERE queue = 'mail'")], pause=0.1)
        log = (Path(info.params.socket_dir) / LOG_NAME).read_text()
        for conn in [*sessions.values(), shop, root]:
            conn.close()
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if "still waiting" in line)
    (HERE / "postgresql-lock-vs-update.log").write_text("\n".join(lines[start:]) + "\n")
    (HERE / "postgresql-lock-vs-update.schema.sql").write_text(PG_BIGSERIAL)


if __name__ == "__main__":
    mariadb_reports()
    postgresql_reports()
    postgresql_lock_vs_update()
