"""Which metadata lock waits on which: the server's compatibility rules for table metadata locks.

A table's metadata lock request waits for a granted lock it conflicts with, and also for an
earlier request still in the queue that it must not overtake: a waiting LOCK TABLES ... WRITE
(SHARED_NO_READ_WRITE) keeps every new claim (SHARED_WRITE) out even though the claims already
granted let both through. The two tables are the server's own (MDL_object_lock's granted and
waiting incompatibility in sql/mdl.cc, the same on MariaDB and MySQL), keyed by the names
MariaDB's METADATA_LOCK_INFO prints (MySQL's performance_schema drops the `MDL_`).
"""

from __future__ import annotations

import re

S, SH, SR, SW, SWLP = "MDL_SHARED", "MDL_SHARED_HIGH_PRIO", "MDL_SHARED_READ", "MDL_SHARED_WRITE", "MDL_SHARED_WRITE_LOW_PRIO"
SU, SRO, SNW, SNRW, X = "MDL_SHARED_UPGRADABLE", "MDL_SHARED_READ_ONLY", "MDL_SHARED_NO_WRITE", "MDL_SHARED_NO_READ_WRITE", "MDL_EXCLUSIVE"
ALL = (S, SH, SR, SW, SWLP, SU, SRO, SNW, SNRW, X)

# Request -> the granted modes it waits for.
GRANTED_CONFLICTS = {
    S: {X},
    SH: {X},
    SR: {SNRW, X},
    SW: {SRO, SNW, SNRW, X},
    SWLP: {SRO, SNW, SNRW, X},
    SU: {SU, SNW, SNRW, X},
    SRO: {SW, SWLP, SNW, SNRW, X},
    SNW: {SW, SWLP, SU, SNW, SNRW, X},
    SNRW: {SR, SW, SWLP, SU, SRO, SNW, SNRW, X},
    X: set(ALL),
}
# Request -> the earlier, still waiting requests it queues behind.
PENDING_CONFLICTS = {
    S: {X},
    SH: set(),
    SR: {SNRW, X},
    SW: {SNW, SNRW, X},
    SWLP: {SRO, SNW, SNRW, X},
    SU: {X},
    SRO: {SW, SNRW, X},
    SNW: {X},
    SNRW: {X},
    X: set(),
}

# MariaDB lists granted metadata locks only, so a waiting statement's request is known by
# what the server asks for that kind of statement; tests/test_waits.py checks each against
# the lock MariaDB grants it. A statement not listed (ALTER TABLE asks for one mode, then
# upgrades it) has no known request, and its wait is told by the granted locks alone.
REQUESTS = (
    (re.compile(r"LOCK\s+TABLES?\b[^;]*\bWRITE\b", re.IGNORECASE), SNRW),
    (re.compile(r"LOCK\s+TABLES?\b[^;]*\bREAD\b", re.IGNORECASE), SRO),
    (re.compile(r"SELECT\b[^;]*\bFOR\s+UPDATE\b", re.IGNORECASE), SW),
    (re.compile(r"SELECT\b[^;]*\bLOCK\s+IN\s+SHARE\s+MODE\b", re.IGNORECASE), SR),
    (re.compile(r"SELECT\b", re.IGNORECASE), SR),
    (re.compile(r"(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE), SW),
)


def mode_name(mode: str) -> str:
    """MariaDB's name for a mode, whichever server printed it."""
    return mode if mode.startswith("MDL_") else f"MDL_{mode}"


def requested(statement: str | None) -> str:
    """The mode the server asks for this statement's tables; "" when not known."""
    text = (statement or "").lstrip(" \t\r\n(")
    return next((mode for pattern, mode in REQUESTS if pattern.match(text)), "")


def waits_for_granted(request: str, granted: str) -> bool:
    return mode_name(granted) in GRANTED_CONFLICTS.get(mode_name(request), set(ALL))


def queued_behind(request: str, pending: str) -> bool:
    return mode_name(pending) in PENDING_CONFLICTS.get(mode_name(request), set())
