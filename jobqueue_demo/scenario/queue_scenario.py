"""A queue file as a Scenario for `explore --queue`: two claimers A and B (an enqueuer E with
`enqueue_during`, a rescuer R when the file has `rescue:`), each running the file's statements
once, so that explore's every interleaving, faults, anomalies and shortest counterexample
work on the user's own SQL.

Each claimer claims one job (`:batch` is 1): the claim statement that returns the ids is the
step that captures `:job`, and the tool's own record (jqd_claims, jqd_effects, jqd_done) is
written by steps of its own in the transaction the file's `work:` names. The invariants read
only those tables, never the file's.

The rescuer runs once, late: in its statements the clock reads a year ahead, so that every
claim is older than whatever threshold the file's rescue waits for (a lease, "stuck for an
hour"). It may then put back a job a claimer still holds, which is what a rescue is for (the
job runs at least once, as after a kill): a job done twice because the rescue put it back
before its first completion committed is not counted. One put back after its completion
committed is: the completed job revived. Which came first is told by the order of the tool's
marks in jqd_commits, each written right after the COMMIT it follows.
"""

from __future__ import annotations

from ..engine import mysql
from ..engine.sql_lexer import PUNCT, WORD, tokens
from ..errors import UsageError
from .model import Invariant, Scenario, SessionSpec, Statement
from .queue_file import QueueFile, QueueSql

CLAIMERS = ("A", "B")
JOBS = 2  # one for each claimer
RECORD_TABLES = (
    "CREATE TABLE jqd_claims (job_id INT NULL, worker INT NOT NULL)",
    "CREATE TABLE jqd_effects (job_id INT NULL, worker INT NOT NULL)",
    "CREATE TABLE jqd_done (job_id INT NULL, worker INT NOT NULL)",
)
DONE_TWICE = (
    "SELECT job_id, COUNT(*) FROM jqd_done WHERE job_id IS NOT NULL GROUP BY job_id HAVING COUNT(*) > 1 ORDER BY job_id"
)
# ... but for a job the rescuer put back before its first completion committed (at least once).
DONE_TWICE_WITH_RESCUE = (
    "SELECT d.job_id, COUNT(*) FROM jqd_done d WHERE d.job_id IS NOT NULL GROUP BY d.job_id HAVING COUNT(*) > 1"
    " AND NOT EXISTS (SELECT 1 FROM jqd_commits r WHERE r.what = 'rescued' AND r.job_id = d.job_id"
    " AND r.seq < (SELECT MIN(c.seq) FROM jqd_commits c WHERE c.what = 'done' AND c.job_id = d.job_id))"
    " ORDER BY d.job_id"
)
LEFT_CLAIMED = (
    "SELECT DISTINCT job_id FROM jqd_claims WHERE job_id IS NOT NULL"
    " AND job_id NOT IN (SELECT job_id FROM jqd_done WHERE job_id IS NOT NULL) ORDER BY job_id"
)
# The marks' table: a number the server gives in insertion order.
COMMITS_TABLE = {
    mysql.NAME: "CREATE TABLE jqd_commits (seq INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(8) NOT NULL, job_id INT NULL)",
}
COMMITS_TABLE_OTHERS = "CREATE TABLE jqd_commits (seq SERIAL PRIMARY KEY, what VARCHAR(8) NOT NULL, job_id INT NULL)"
# The rescuer's clock: each of these calls, and the two words that read it bare, is read a year later.
CLOCKS = {"NOW", "CLOCK_TIMESTAMP", "STATEMENT_TIMESTAMP", "TRANSACTION_TIMESTAMP", "SYSDATE", "UTC_TIMESTAMP"}
BARE_CLOCKS = {"CURRENT_TIMESTAMP", "LOCALTIMESTAMP"}


def _invariants(rescue: bool) -> tuple[Invariant, ...]:
    return (
        Invariant("no job done twice", DONE_TWICE_WITH_RESCUE if rescue else DONE_TWICE, (), 0, "always"),
        Invariant("no job left claimed", LEFT_CLAIMED, (), 0, "without-faults"),
    )


def queue_scenario(queue: QueueFile, enqueue_during: bool = False, fail_once: bool = False) -> Scenario:
    """The file as one Scenario per engine it is written for (Scenario.for_engine hands each out).
    `fail_once`: A's first job fails; A runs the file's `fail` and `retry` for it, then claims again."""
    if fail_once and not all(sql.fail and sql.retry for sql in queue.variants.values()):
        raise UsageError(f"{queue.path}: --fail-once needs fail: and retry: (what your queue runs when a job fails, "
                         "and what makes it claimable again)")
    variants = {
        engine: _scenario(queue, engine, queue.for_engine(engine), enqueue_during, fail_once) for engine in queue.engines
    }
    for scenario in variants.values():
        scenario.variants = variants
    return variants[queue.engines[0]]


def _scenario(queue: QueueFile, engine: str, sql: QueueSql, enqueue_during: bool, fail_once: bool) -> Scenario:
    enqueued_first = 1 if enqueue_during else JOBS
    setup = [s.sql for s in sql.setup] + list(RECORD_TABLES)
    if sql.rescue:
        setup.append(COMMITS_TABLE.get(engine, COMMITS_TABLE_OTHERS))
    setup += [s.bind({"job": str(job)}) for job in range(1, enqueued_first + 1) for s in sql.enqueue]
    steps = []
    for worker, name in enumerate(CLAIMERS):
        if fail_once and worker == 0:
            steps += _failing(name, worker, sql)
        steps += _claimer(name, worker, sql, marks=bool(sql.rescue))
    names = list(CLAIMERS)
    if enqueue_during:
        names.append("E")
        steps += _enqueuer(sql, range(enqueued_first + 1, JOBS + 1))
    if sql.rescue:
        names.append("R")
        steps += _rescuer(sql, engine)
    return Scenario(
        path=queue.path,
        title=queue.title or queue.name,
        sessions=tuple(SessionSpec(n) for n in names),
        steps=tuple(steps),
        setup=";\n".join(setup) + ";",
        summary=queue.models,
        invariants=_invariants(bool(sql.rescue)),
        engine=engine,
        engines=queue.engines,
        tool_record=True,
    )


def _bound(statement, worker: int) -> str:
    """The statement for one claimer: `:job` and `:jobs` left for the capture, the rest bound."""
    return statement.bind({"job": ":job", "jobs": ":job", "batch": "1", "worker": str(worker)})


def _claimer(name: str, worker: int, sql: QueueSql, marks: bool = False) -> list[Statement]:
    def step(text: str, line: int = 0, capture: str | None = None) -> Statement:
        return Statement(name, text, line, capture=capture)

    def record(table: str) -> Statement:
        return Statement(name, f"INSERT INTO {table} (job_id, worker) VALUES (:job, {worker})", 0, glued=True)

    gives = _capturing(sql.claim)
    steps = [_begin(name)]
    steps += [step(_bound(s, worker), s.line, "job" if i == gives else None) for i, s in enumerate(sql.claim)]
    steps.append(record("jqd_claims"))
    complete = [step(_bound(s, worker), s.line) for s in sql.complete]
    if sql.work == "after-commit":
        steps += [step("COMMIT"), record("jqd_effects"), _begin(name), *complete, record("jqd_done"), step("COMMIT")]
    else:
        steps += [record("jqd_effects"), *complete, record("jqd_done"), step("COMMIT")]
    if marks:
        steps.append(_mark(name, "done", ":job"))
    return steps


def _failing(name: str, worker: int, sql: QueueSql) -> list[Statement]:
    """A claim whose job's effect fails: the claim rolled back (in-claim) or committed
    (after-commit), then the file's `fail` and `retry` for the job, each in a transaction of its
    own. Nothing is recorded: the job ran no effect, and `fail` and `retry` hand it back to the
    queue, so a schedule in which nobody claims it again ends with work left, no finding."""
    gives = _capturing(sql.claim)
    steps = [_begin(name)]
    steps += [Statement(name, _bound(s, worker), s.line, capture="job" if i == gives else None) for i, s in enumerate(sql.claim)]
    steps.append(Statement(name, "COMMIT" if sql.work == "after-commit" else "ROLLBACK", 0))
    for part in (sql.fail, sql.retry):
        steps += [_begin(name), *(Statement(name, _bound(s, worker), s.line) for s in part), Statement(name, "COMMIT", 0)]
    return steps


def _begin(session: str) -> Statement:
    """BEGIN reads and locks nothing (both engines take the snapshot at the transaction's first
    statement), so where it runs changes nothing: glued, it adds no schedules."""
    return Statement(session, "BEGIN", 0, glued=True)


def _mark(session: str, what: str, job: str) -> Statement:
    """Glued right after a COMMIT: the marks' order is the commits' order."""
    return Statement(session, f"INSERT INTO jqd_commits (what, job_id) VALUES ('{what}', {job})", 0, glued=True)


def _capturing(claim) -> int:
    """Which claim statement gives the ids: of those before the first that needs them (:job,
    :jobs), the first that reads (SELECT, WITH, RETURNING), else the last of them."""
    needing = next((i for i, s in enumerate(claim) if s.uses("job") or s.uses("jobs")), len(claim))
    reading = [i for i in range(needing) if _reads(claim[i].sql)]
    return reading[0] if reading else max(needing - 1, 0)


def _reads(sql: str) -> bool:
    return sql.lstrip().upper().startswith(("SELECT", "WITH")) or "RETURNING" in sql.upper()


def _enqueuer(sql: QueueSql, jobs) -> list[Statement]:
    steps = []
    for job in jobs:
        steps.append(_begin("E"))
        steps += [Statement("E", s.bind({"job": str(job)}), s.line) for s in sql.enqueue]
        steps.append(Statement("E", "COMMIT", 0))
    return steps


def _rescuer(sql: QueueSql, engine: str) -> list[Statement]:
    gives = _capturing(sql.rescue)
    steps = [_begin("R")]
    steps += [
        Statement("R", later(s.bind({"job": ":rescued", "jobs": ":rescued", "worker": "-1"}), engine), s.line,
                  capture="rescued" if i == gives else None)
        for i, s in enumerate(sql.rescue)
    ]
    steps += [Statement("R", "COMMIT", 0), _mark("R", "rescued", ":rescued")]
    return steps


def later(sql: str, engine: str) -> str:
    """`sql` with each read of the clock (NOW(), CURRENT_TIMESTAMP, clock_timestamp()...) a year later."""
    found = list(tokens(sql, mysql=engine == mysql.NAME))
    out, at = [], 0
    for i, (kind, start, end, text) in enumerate(found):
        if kind != WORD or text not in CLOCKS | BARE_CLOCKS or (i and found[i - 1][3] == "."):
            continue
        called = i + 1 < len(found) and found[i + 1][3] == "("
        if not called and text not in BARE_CLOCKS:
            continue  # a column of that name
        close = _call_end(found, i) if called else end
        if close < start:
            continue
        out += [sql[at:start], "(", sql[start:close], " + INTERVAL '1' YEAR)"]
        at = close
    out.append(sql[at:])
    return "".join(out)


def _call_end(found: list, i: int) -> int:
    """Where the call whose name is found[i] ends: after its closing parenthesis."""
    depth = 0
    for kind, _start, end, text in found[i + 1 :]:
        if kind == PUNCT and text == "(":
            depth += 1
        elif kind == PUNCT and text == ")":
            depth -= 1
            if depth == 0:
                return end
    return -1
