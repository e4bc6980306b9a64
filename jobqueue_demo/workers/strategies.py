"""The claim strategies: the one list of them, read by the workers, the bench and the CLI.

A strategy names how claimers.py claims (`claim`, one of claimers.RECIPES) and what the rest
of the tool does with it. Adding a strategy that claims in an existing way is one entry here.
This module imports nothing heavy: the CLI reads it to build its help.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    name: str
    summary: str
    claim: str  # "select", "update-limit", "own-rows" or "lease"
    lock: str = "none"  # a "select" claim's lock: skip-locked, wait, nowait or none (engine/queue_sql.LOCKS)
    swept: bool = True  # in bench's default sweep
    broken: bool = False  # there to show what the invariant checks catch
    ceiling: bool = False  # no contention: the reference the bench compares with
    lease_ms: float = 0.0  # default lease of the lease strategies
    heartbeat: bool = False  # the worker extends its lease while it works

    @property
    def lease(self) -> bool:
        return self.claim == "lease"


REGISTRY = (
    Strategy("skip-locked", "SELECT ... FOR UPDATE SKIP LOCKED: lock the first unlocked queued row", "select",
             "skip-locked"),
    Strategy("for-update", "SELECT ... FOR UPDATE: wait for the first queued row's lock", "select", "wait"),
    Strategy("nowait-retry", "SELECT ... FOR UPDATE NOWAIT: fail at once on a locked row, back off, retry", "select",
             "nowait"),
    Strategy("update-limit", "UPDATE the first k queued rows to running, waiting for locked ones, and take "
             "what it marked: the claim before SKIP LOCKED existed", "update-limit"),
    Strategy("lease", "claim and commit (running, lease, owner token), work outside the transaction, "
             "complete where the token still matches; expired leases are claimed again", "lease", lease_ms=1000.0),
    Strategy("lease-heartbeat", "lease, kept short and extended by the worker while it works", "lease",
             lease_ms=250.0, heartbeat=True),
    Strategy("no-lock", "plain SELECT then UPDATE: the broken claim; the invariant check catches it", "select",
             swept=False, broken=True),
    Strategy("own-rows", "each worker locks rows of its own: no contention, the ceiling", "own-rows",
             swept=False, ceiling=True),
)
STRATEGIES = {s.name: s for s in REGISTRY}
