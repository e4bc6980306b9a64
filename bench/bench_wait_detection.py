"""Lock-wait detection latency: from the server entering the wait to the waiting marker.

An observer thread on its own connection polls SHOW ENGINE INNODB STATUS back to back
(about 0.2 ms a poll) and notes when B's transaction first shows LOCK WAIT; the latency is
the time from that moment to the runner handing out its Waiting event. The anchor, in the
same run, is isolationtester's way: poll every 10 ms after sending.

    .venv/bin/python bench/bench_wait_detection.py [--rounds 30] [--dsn mysql://root@127.0.0.1:3306/test]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from jobqueue_demo.run import events as ev
from jobqueue_demo.scenario.loader import load_scenario
from jobqueue_demo.run.driver import Run
from jobqueue_demo.engine.server import open_server
from jobqueue_demo.engine.session import Session
from jobqueue_demo.engine.waits import WaitMonitor, parse_innodb_status

SCENARIO = Path(__file__).resolve().parent / "wait.yaml"
ANCHOR_POLL_S = 0.010


class Observer(threading.Thread):
    """Notes the first moment any transaction of the watched threads shows LOCK WAIT."""

    def __init__(self, params):
        super().__init__(daemon=True)
        self.conn = params.connect()
        self.first_seen: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.conn.query(b"SHOW ENGINE INNODB STATUS")
            text = self.conn.store_result().fetch_row(0)[0][2]
            now = time.perf_counter()
            status = parse_innodb_status(text if isinstance(text, str) else text.decode())
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


def anchor_latency(server, observer: Observer) -> float:
    """isolationtester's scheme: after sending, check for a wait every 10 ms."""
    control = server.params.connect(multi_statements=True)
    database = "jqd_bench_anchor"
    control.query(f"CREATE DATABASE {database}".encode())
    try:
        control.query(f"CREATE TABLE {database}.jobs (id INT PRIMARY KEY) ENGINE=InnoDB".encode())
        control.query(f"INSERT INTO {database}.jobs VALUES (1)".encode())
        a = server.params.connect(database=database)
        b = server.params.connect(database=database)
        a.query(b"BEGIN")
        a.query(b"SELECT id FROM jobs WHERE id = 1 FOR UPDATE")
        a.store_result()
        waiter = Session("B", b, b.thread_id())
        b.query(b"BEGIN")
        waiter.send("SELECT id FROM jobs WHERE id = 1 FOR UPDATE")
        monitor = WaitMonitor(control, server.flavor)
        while True:
            time.sleep(ANCHOR_POLL_S)
            if monitor.blocked([waiter.thread_id]):
                marked = time.perf_counter()
                break
        a.query(b"ROLLBACK")
        waiter.read()
        a.close()
        b.close()
        return marked - seen_at(observer, waiter.thread_id)
    finally:
        control.query(f"DROP DATABASE {database}".encode())
        control.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--dsn", default=None, help="default: the embedded throwaway server")
    args = parser.parse_args()
    scenario = load_scenario(str(SCENARIO))
    ours, anchor = [], []
    with open_server(args.dsn) as server:
        observer = Observer(server.params)
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
