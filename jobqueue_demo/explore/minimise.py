"""The shortest prefix of a failing schedule that fails the same way, for certain.

Explore's shortest schedule runs every session to its end, though the violation is often
complete earlier. Cutting a schedule short is only honest where the steps cut cannot change
what the invariants see: reads, BEGIN, ROLLBACK and failed statements (a prefix run ends
with the sessions reset, which rolls back what is uncommitted, as a ROLLBACK would). So the
tail of such steps is cut, the prefix run again, and kept only if it fails exactly as the
full schedule did. A shorter prefix that merely looks the same (a deposit not made yet
leaves the same wrong balance as a lost one) is never offered.
"""

from __future__ import annotations

from ..run import events as ev
from ..scenario.fault_kinds import BY_NAME
from .anomaly import BEGINS, ENDS, READS


class PrefixChoice:
    """Takes the given moves, then stops the schedule."""

    def __init__(self, moves):
        self.moves = moves
        self.index = 0  # a chooser's walk number, which orders sampled walks; one walk here

    def choose(self, taken, enabled):
        depth = len(taken)
        if depth >= len(self.moves) or self.moves[depth] not in enabled:
            return None
        return self.moves[depth]


def failures(execution) -> set:
    """What failed, by value: an error is a new object in every schedule and compares by identity."""
    return {(c.invariant.name, c.got.rows, _error_key(c.got.error)) for c in execution.checks if not c.held}


def _error_key(error) -> tuple | None:
    return None if error is None else (error.code, error.message)


def _changes_nothing(event: ev.Completed) -> bool:
    sql = event.sql
    rolls_back = ENDS.match(sql) and not sql.split()[0].upper().startswith("COMMIT")
    return event.result.error is not None or bool(READS.match(sql) or BEGINS.match(sql) or rolls_back)


def _needed(space, execution) -> int:
    """How many moves the schedule needs: up to its last one that may change the database."""
    answers = {(e.session, e.index): e for e in execution.events if isinstance(e, ev.Completed)}
    needed = 0
    for taken, move in enumerate(execution.moves, 1):
        index = space.tracks[move.session][move.position][0]
        answer = answers.get((move.session, index))
        # A dropped socket gets no answer to judge, and its transaction is rolled back, as the prefix's reset would.
        dropped = move.fault and BY_NAME[move.fault].drops_socket
        if not dropped and (answer is None or not _changes_nothing(answer)):
            needed = taken
    return needed


def shortest_prefix(space, runner, execution):
    """The prefix run that fails as `execution` does, or `execution` when none is shorter."""
    wanted = failures(execution)
    length = _needed(space, execution)
    if not wanted or execution.stuck or execution.diverged or length >= len(execution.moves):
        return execution
    trial = runner.run(PrefixChoice(execution.moves[:length]))
    if len(trial.moves) == length and not trial.stuck and failures(trial) == wanted:
        return trial
    return execution
