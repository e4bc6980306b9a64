"""What a run asks of a Galera cluster's nodes beyond one server's SQL: how far a node has
applied the cluster's write sets, the tables Galera cannot replicate, why a transaction
on a node was rolled back with ERROR 1213, and, when a run stalls, the node's applier threads
and its flow-control state.

Every function takes the tool's own connection to one node (MariaDB with wsrep on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...errors import ServerError
from ..mysql import control
from ..mysql.scratch import literal
from ..types import BY_BRUTE_FORCE, BY_CERTIFICATION, BY_DEADLOCK

CATCH_UP_TIMEOUT_S = 30.0
CATCH_UP_POLL_S = (0.0005, 0.002)  # first and longest sleep between reads

# In the order they are told apart: when a COMMIT races a conflicting write set, Galera often
# counts the loser both as brute-force aborted and as failing certification (17 of 20 such
# races on two nodes here): it did reach certification, so that is what it is told as.
CAUSE_COUNTERS = (
    ("Innodb_deadlocks", BY_DEADLOCK),
    ("wsrep_local_cert_failures", BY_CERTIFICATION),
    ("wsrep_local_bf_aborts", BY_BRUTE_FORCE),
)


def last_committed(conn) -> int:
    """The cluster-wide seqno of the last write set this connection's node has applied."""
    found = control.rows(conn, "SHOW STATUS LIKE 'wsrep_last_committed'")
    return int(control.text(found[0][1])) if found else 0


def catch_up(conn, seqno: int) -> None:
    """Wait until this connection's node has applied the cluster's write sets up to `seqno`
    (wsrep_sync_wait is not used: a statement without tables skips it)."""
    if not applied(conn, seqno, CATCH_UP_TIMEOUT_S):
        raise ServerError(f"a cluster node did not apply write set {seqno} within {CATCH_UP_TIMEOUT_S:.0f} s")


def applied(conn, seqno: int, timeout: float) -> bool:
    """Whether this connection's node has applied the write sets up to `seqno`, waiting for
    it at most `timeout` seconds."""
    deadline = time.perf_counter() + timeout
    interval, longest = CATCH_UP_POLL_S
    while last_committed(conn) < seqno:
        if time.perf_counter() > deadline:
            return False
        time.sleep(interval)
        interval = min(interval * 2, longest)
    return True


def unreplicable_tables(conn, database: str) -> list[str]:
    """The tables of `database` Galera does not replicate: not InnoDB, or without a primary key."""
    found = control.rows(
        conn,
        "SELECT t.TABLE_NAME FROM information_schema.TABLES t "
        "LEFT JOIN information_schema.TABLE_CONSTRAINTS c ON c.TABLE_SCHEMA = t.TABLE_SCHEMA "
        "AND c.TABLE_NAME = t.TABLE_NAME AND c.CONSTRAINT_TYPE = 'PRIMARY KEY' "
        f"WHERE t.TABLE_SCHEMA = {literal(database)} AND t.TABLE_TYPE = 'BASE TABLE' "
        "AND (t.ENGINE <> 'InnoDB' OR c.CONSTRAINT_NAME IS NULL) ORDER BY t.TABLE_NAME",
    )
    return [control.text(name) for (name,) in found]


def _cause_counters(conn) -> dict[str, int]:
    names = ", ".join(literal(name) for name, _ in CAUSE_COUNTERS)
    found = control.rows(conn, f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
    return {control.text(name).lower(): int(control.text(value)) for name, value in found}


class RollbackCauses:
    """Why a session on a node got ERROR 1213, told from that node's counters.

    The error is the same for all three causes (and its text says "Deadlock found"), so it is
    decided from the server: each cause has a counter of its own on the node, and the one that
    rose is the cause. Reading the counters after the error is enough: all three count the
    transaction before its client hears of it, so no statement pays for a read beforehand;
    they are read once when the run starts (`mark`). A rise is used up by the error it
    explains, so two sessions of one node aborted by the same write set are each told. A
    rise no error of ours explains (a session aborted and never heard from again, a session
    reset that met a late write set) stays, and cannot mislead: every 1213 raises its own
    counter, and the counters are tried in the order deadlock, certification, brute force,
    so what is left over is a brute-force rise (the loser of a COMMIT race often raises both
    certification and brute force), and it can only be taken for another brute-force abort.

    The counters are the node's, not the run's: on a cluster other clients use (`--dsn
    nodeN=…`) one of their rollbacks between two of ours could be taken for ours. Reading
    the deadlock monitor instead would not do: a brute-force abort leaves no trace there, and
    "no cycle found" also means an unreadable or overwritten LATEST DETECTED DEADLOCK.
    """

    def __init__(self) -> None:
        self._told: dict[int, dict[str, int]] = {}  # node -> each counter, as far as explained

    def mark(self, node: int, conn) -> None:
        """Everything the node counted so far is explained (none of it is this run's)."""
        self._told[node] = _cause_counters(conn)

    def cause(self, node: int, conn) -> str | None:
        """BY_DEADLOCK, BY_CERTIFICATION or BY_BRUTE_FORCE; None when no counter rose."""
        now = _cause_counters(conn)
        told = self._told.setdefault(node, dict(now))
        for name, cause in CAUSE_COUNTERS:
            key = name.lower()
            if now.get(key, 0) > told.get(key, 0):
                told[key] = told.get(key, 0) + 1
                return cause
        return None


# The status a node's flow control is read from (wsrep_flow_control_active and _requested are
# MariaDB 10.11's; an older node lacks them, and they read as off).
FLOW_STATUS = (
    "wsrep_flow_control_active",
    "wsrep_flow_control_requested",
    "wsrep_local_recv_queue",
    "wsrep_local_send_queue",
    "wsrep_flow_control_paused",
    "wsrep_local_state_comment",
)


def flow_control(conn, node: int) -> FlowControl:
    """The flow-control state of this connection's node."""
    names = ", ".join(literal(name) for name in FLOW_STATUS)
    found = control.rows(conn, f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
    status = {control.text(name).lower(): control.text(value) or "" for name, value in found}
    return FlowControl(
        node=node,
        active=status.get("wsrep_flow_control_active") == "true",
        requested=status.get("wsrep_flow_control_requested") == "true",
        recv_queue=int(status.get("wsrep_local_recv_queue") or 0),
        send_queue=int(status.get("wsrep_local_send_queue") or 0),
        paused=float(status.get("wsrep_flow_control_paused") or 0),
        state=status.get("wsrep_local_state_comment", ""),
    )


def appliers(conn) -> list[int]:
    """The thread ids of the node's appliers: the processlist's 'system user' (the BF aborter
    is one too, but it holds and waits for no row lock, so it never shows in a lock wait)."""
    found = control.rows(conn, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'system user'")
    return [int(thread) for (thread,) in found]


@dataclass(frozen=True)
class FlowControl:
    """One node's flow-control state: whether it asked the cluster to pause, and its queues."""

    node: int
    active: bool  # replication is paused cluster-wide, as this node sees it
    requested: bool  # this node asked for the pause: its receive queue passed the limit
    recv_queue: int  # write sets received and not yet applied
    send_queue: int  # local write sets not yet sent
    paused: float  # share of the time since FLUSH STATUS that replication was paused
    state: str  # e.g. "Synced"; a "Desynced" node asks for no pause however long its queue

    @property
    def queued(self) -> bool:
        return self.active or self.requested or self.recv_queue > 0
