"""Lock-wait detection latency: from the server entering the wait to the waiting marker.

An observer thread on its own connection polls the server back to back (the wait monitor's
`transactions()`: SHOW ENGINE INNODB STATUS on MariaDB/MySQL, about 0.2 ms a poll;
pg_stat_activity's wait_event_type on PostgreSQL) and notes when B first shows a lock wait;
the latency is the time from that moment to the runner handing out its Waiting event. The
anchor, in the same run, is isolationtester's way: poll every 10 ms after sending.

    .venv/bin/python bench/bench_wait_detection.py [--rounds 30] [--engine postgresql] [--dsn mysql://root@127.0.0.1:3306/test]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from jobqueue_demo.engine.seam import open_server
from jobqueue_demo.run import events as ev
from jobqueue_demo.run.driver import Run
from jobqueue_demo.scenario.loader import load_scenario

SCENARIO = Path(__file__).resolve().parent / "wait.yaml"
ANCHOR_POLL_S = 0.010
LOCK = "SELECT id FROM jobs WHERE id = 1 FOR UPDATE"


class Observer(threading.Thread):
    """Notes the first moment each watched connection shows a lock wait."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.conn = server.params.connect()
        self.monitor = server.seam.wait_monitor(self.conn, server)
        self.first_seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            status = self.monitor.transactions()
            now = time.perf_counter()
            for tid, trx in status.items():
                if trx.lock_wait:
                    self.first_seen.setdefault(tid, now)

    def close(self) -> None:
        self.stop.set()
        self.join()
        self.conn.close()


def seen_at(observer: Observer, thread_id: int) -> float:
    """The observer's sighting; under load it may come after the runner's own (a negative latency)."""
    deadline = time.perf_counter() + 1.0
    while thread_id not in observer.first_seen and time.perf_counter() < deadline:
        time.sleep(0.0001)
    return observer.first_seen[thread_id]


def runner_latency(scenario, server, observer: Observer) -> float:
    run = Run(scenario, server)
    latency = None
    for event in run.events():
        if isinstance(event, ev.Waiting) and latency is None:
            marked = time.perf_counter()
            latency = marked - seen_at(observer, run.sessions[event.session].thread_id)
    return latency


def answered(session, sql: str) -> None:
    session.send(sql)
    session.read()


def anchor_latency(server, observer: Observer) -> float:
    """isolationtester's scheme: after sending, check for a wait every 10 ms."""
    seam = server.seam
    scratch = seam.scratch(server, confine=False, multi_statements=True)
    scratch.open()
    try:
        setup = seam.user_connection(scratch, 10.0)
        seam.run_script(setup, "CREATE TABLE jobs (id INT PRIMARY KEY); INSERT INTO jobs VALUES (1)")
        a, b = (seam.session(name, scratch, None, 10.0) for name in ("A", "B"))
        for session in (a, b):
            answered(session, "BEGIN")
        answered(a, LOCK)
        monitor = seam.wait_monitor(scratch.conn, server)
        b.send(LOCK)
        while True:
            time.sleep(ANCHOR_POLL_S)
            if monitor.blocked([b.thread_id]):
                marked = time.perf_counter()
                break
        answered(a, "ROLLBACK")
        b.read()
        for conn in (a, b):
            conn.close()
        setup.close()
        return marked - seen_at(observer, b.thread_id)
    finally:
        scratch.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--engine", default="mysql", choices=("mysql", "postgresql"), help="the embedded server's engine")
    parser.add_argument("--dsn", default=None, help="default: the embedded throwaway server")
    args = parser.parse_args()
    scenario = load_scenario(str(SCENARIO))
    ours, anchor = [], []
    with open_server(args.dsn, args.engine) as server:
        observer = Observer(server)
        observer.start()
        try:
            for _ in range(args.rounds):
                ours.append(runner_latency(scenario, server, observer))
                anchor.append(anchor_latency(server, observer))
        finally:
            observer.close()
        label = f"{server.label} ({server.where})"
    mine, theirs = statistics.median(ours) * 1000, statistics.median(anchor) * 1000
    print(f"lock-wait detection latency on {label}, median of {args.rounds} interleaved rounds")
    print(f"  jobqueue-demo runner              {mine:7.2f} ms   (p90 {sorted(ours)[int(len(ours) * 0.9)] * 1000:.2f} ms)")
    print(f"  anchor: poll every 10 ms         {theirs:7.2f} ms")
    print(f"  ratio runner / anchor             {mine / theirs:7.2f}   (goal: runner median <= 2 ms)")


if __name__ == "__main__":
    main()
