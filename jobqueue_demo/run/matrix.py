"""`--matrix NAME=V1,V2`: one lesson under every combination of server settings.

Each axis names a server variable (or `isolation`, the sessions' isolation level under the
server's own variable name) and the values to try. A variable a session may set is set on
every session of the run (after the scenario's own settings, so the matrix wins); sql_mode
keeps the NO_DIR_IN_CREATE every session has (engine/mysql/server.py), whatever the values. A
variable the server takes only globally is set with SET GLOBAL on the private embedded
server and put back afterwards. A read-only one (given only when a server starts) gets a
second private server started with it as an option, used while consecutive combinations
want the same values and then stopped: the first server is never changed, so nothing needs
putting back. On a --dsn server, shared with others, both kinds are refused. The
outcome of each step under each combination is compared, hermitage-style: the table keeps
the steps whose outcome differs.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass

from ..engine.types import ControlError
from ..errors import StartFailed, UsageError
from ..scenario.model import ISOLATION_LEVELS, Scenario, Statement, one_line
from . import events as ev

ER_UNKNOWN_SYSTEM_VARIABLE = 1193
ER_GLOBAL_VARIABLE = 1229
ER_WRONG_VALUE_FOR_VAR = 1231
ER_WRONG_TYPE_FOR_VAR = 1232
ER_INCORRECT_GLOBAL_LOCAL_VAR = 1238
SESSION, GLOBAL, STARTUP = "SESSION", "GLOBAL", "STARTUP"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[str, ...]
    scope: str = SESSION  # or GLOBAL, STARTUP: on the embedded server only


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    scope: str

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


def parse_axes(texts: list[str]) -> list[Axis]:
    axes = []
    for text in texts:
        name, sep, values = text.partition("=")
        parts = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not NAME.match(name.strip()) or not parts or not all(VALUE.match(v) for v in parts):
            raise UsageError(f"--matrix {text}: write NAME=VALUE1,VALUE2 (a server variable or isolation)")
        if name.strip() == "isolation":
            unknown = [v for v in parts if v not in ISOLATION_LEVELS]
            if unknown:
                raise UsageError(f"--matrix {text}: '{unknown[0]}' is not one of {', '.join(ISOLATION_LEVELS)}")
        axes.append(Axis(name.strip(), tuple(dict.fromkeys(parts))))
    if len({a.name for a in axes}) < len(axes):
        raise UsageError("--matrix: each setting once; put its values after one '=', comma-separated")
    return axes


def _assignment(server, setting: Setting) -> str:
    if setting.name == "isolation":
        return server.dialect.isolation_setting(setting.value)
    return server.seam.variables().assignment(setting.name, _literal(setting.value))


def _literal(value: str | None) -> str:
    """A number bare (integer variables refuse a string), anything else quoted (ON, a level)."""
    if value is None:
        return "NULL"
    if re.fullmatch(r"-?\d+(\.\d+)?", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def classify(server, axes: list[Axis]) -> list[Axis]:
    """Each axis with the scope it can be set in, every value tried once; UsageError if none."""
    variables = server.seam.variables()
    if variables is None:
        raise UsageError(f"--matrix sets MariaDB and MySQL server variables; it does not run on {server.flavor} yet")
    out = []
    with closing(server.params.connect(database=None)) as conn:
        for axis in axes:
            scope = SESSION
            for value in axis.values:
                try:
                    variables.set_session(conn, _assignment(server, Setting(axis.name, value, scope)))
                except ControlError as e:
                    scope = _scope_after(axis.name, value, e.errno)
                    if scope == STARTUP:
                        break  # a value is checked when a server starts with it
            if scope != SESSION and not server.embedded:
                raise UsageError(f"--matrix {axis.name}: {_shared_refusal(scope)}")
            out.append(Axis(axis.name, axis.values, scope))
    return out


def _scope_after(name: str, value: str, errno: int) -> str:
    if errno == ER_GLOBAL_VARIABLE:
        return GLOBAL
    if errno == ER_INCORRECT_GLOBAL_LOCAL_VAR:
        return STARTUP
    raise UsageError(f"--matrix {name}={value}: {_refusal(errno)}")


def _shared_refusal(scope: str) -> str:
    if scope == GLOBAL:
        return (
            "a global-only variable, set only on the private embedded server (leave out --dsn); "
            "a shared server's globals are not changed"
        )
    return "read-only: it needs a server started with it, done only with the private embedded server (leave out --dsn)"


def _refusal(errno: int) -> str:
    if errno == ER_UNKNOWN_SYSTEM_VARIABLE:
        return "the server has no such variable"
    if errno in (ER_WRONG_VALUE_FOR_VAR, ER_WRONG_TYPE_FOR_VAR):
        return "the server refuses this value"
    return f"the server refused it (ERROR {errno})"


def combinations(axes: list[Axis]) -> list[tuple[Setting, ...]]:
    return [
        tuple(Setting(a.name, v, a.scope) for a, v in zip(axes, values))
        for values in itertools.product(*(a.values for a in axes))
    ]


def session_settings(server, combination: tuple[Setting, ...]) -> tuple[str, ...]:
    """The SET SESSION assignments every session of a run takes."""
    return tuple(_assignment(server, s) for s in combination if s.scope == SESSION)


@contextmanager
def globals_set(server, combination: tuple[Setting, ...]):
    """The global settings of a combination, on the embedded server, put back afterwards."""
    wanted = [s for s in combination if s.scope == GLOBAL]
    if not wanted:
        yield
        return
    variables = server.seam.variables()
    with closing(server.params.connect(database=None)) as conn:
        before = {s.name: variables.global_value(conn, s.name) for s in wanted}
        try:
            for s in wanted:
                variables.set_global(conn, s.name, _literal(s.value))
            yield
        finally:
            for name, value in before.items():
                variables.set_global(conn, name, _literal(value))


@dataclass(frozen=True)
class Restart:
    """A server started for combinations whose read-only settings differ from the first server's."""

    options: tuple[str, ...]  # e.g. ("--innodb-rollback-on-timeout=ON",)
    seconds: float  # from starting it to its first connection


class Servers:
    """The server each combination runs on: the given one, or one started with its read-only
    settings as options, kept while the next combination wants the same and stopped after."""

    def __init__(self, server):
        self.server = server
        self.current = (), server  # the options, and the server started with them
        self.stack = ExitStack()
        self.restarts: list[Restart] = []
        # A combination wanting the first server's own values of read-only variables needs no restart.
        self.running = _global_values(server)

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stack.close()

    @contextmanager
    def configured(self, combination: tuple[Setting, ...]):
        """The server for one combination, its global settings set and put back around it."""
        server = self._started(tuple(s for s in combination if s.scope == STARTUP and not _holds(self.running, s)))
        with globals_set(server, combination):
            yield server

    def _started(self, settings: tuple[Setting, ...]):
        options = tuple(f"--{s.name.replace('_', '-')}={s.value}" for s in settings)
        if options == self.current[0]:
            return self.current[1]
        self.stack.close()
        self.current = (), self.server
        if not options:
            return self.server
        began = time.perf_counter()
        try:
            started = self.stack.enter_context(self.server.seam.embedded(options))
        except StartFailed as e:
            raise UsageError(f"--matrix: {e}") from None
        self.restarts.append(Restart(options, time.perf_counter() - began))
        self.current = options, started
        _check_taken(started, settings)
        return started


@dataclass(frozen=True)
class MatrixRuns:
    """What a --matrix run made: its combinations (the columns of its table), what ran under
    each, in the same order, and the servers started on the way for read-only settings."""

    combinations: list[tuple[Setting, ...]]
    results: list
    restarts: list[Restart]


def under_each(server, texts: list[str], run_one: Callable) -> MatrixRuns:
    """`run_one(target, session_settings)` under every combination of the --matrix axes."""
    plan = combinations(classify(server, parse_axes(texts)))
    results = []
    with Servers(server) as servers:
        # One call per combination: a server started for a combination serves all it runs.
        for combination in plan:
            with servers.configured(combination) as target:
                results.append(run_one(target, session_settings(target, combination)))
    return MatrixRuns(plan, results, servers.restarts)


def _check_taken(server, settings: tuple[Setting, ...]) -> None:
    """A server may start with a value it does not understand, warning and taking another."""
    took = _global_values(server)
    for s in settings:
        if not _holds(took, s):
            raise UsageError(
                f"--matrix {s}: a server started with it took {took.get(s.name.lower())}; "
                "give the value as the server shows it"
            )


def _holds(values: dict[str, str], setting: Setting) -> bool:
    return values.get(setting.name.lower(), "").lower() == setting.value.lower()


def _global_values(server) -> dict[str, str]:
    """Every global variable's value as text, by its name in lower case."""
    with closing(server.params.connect(database=None)) as conn:
        return server.seam.variables().globals(conn)


# -- comparing the runs -----------------------------------------------------------------------


def step_outcomes(scenario: Scenario, events: list) -> dict[int, str]:
    """Step index -> its outcome in a few words, for every statement of the scenario."""
    waited = {e.index for e in events if isinstance(e, ev.Waiting)}
    done = {e.index: e.result for e in events if isinstance(e, ev.Completed)}
    out = {}
    for index, step in enumerate(scenario.steps):
        if isinstance(step, Statement):
            result = done.get(index)
            text = "not run" if result is None else _words(result)
            out[index] = ("waited, " + text) if index in waited else text
    return out


def _words(result) -> str:
    if result.error is not None:
        return f"ERROR {result.error.errno}"
    if result.is_rows:
        count = len(result.rows) + result.omitted
        firsts = ", ".join("NULL" if r[0] is None else r[0] for r in result.rows[:3])
        more = ", ..." if count > 3 else ""
        return f"{count} row{'' if count == 1 else 's'}" + (f" ({firsts}{more})" if count else "")
    if result.affected:
        return f"{result.affected} affected"
    return "ok"


@dataclass(frozen=True)
class Column:
    """One combination's run of a scenario: the outcome of every step, and what is said of it as a whole."""

    steps: dict[int, str]
    summary: str  # "all 13 met", "2 not met" or "stuck"
    met: bool  # every expectation met


@dataclass(frozen=True)
class Differences:
    labels: tuple[str, ...]  # one per row, e.g. "A3 (line 28) SELECT id ..."
    rows: tuple[tuple[str, ...], ...]  # one cell per column, in combination order
    same: int  # steps whose outcome was the same everywhere, not shown


def differences(scenario: Scenario, columns: list[Column]) -> Differences:
    labels, rows, same = [], [], 0
    positions: dict[str, int] = {}
    for index, step in enumerate(scenario.steps):
        if getattr(step, "session", None):  # numbered as explore numbers moves: A3 is A's third step
            positions[step.session] = positions.get(step.session, 0) + 1
        if not isinstance(step, Statement):
            continue
        cells = tuple(c.steps.get(index, "not run") for c in columns)
        if len(set(cells)) == 1:
            same += 1
            continue
        labels.append(f"{step.session}{positions[step.session]} line {step.line}: {one_line(step.sql, 40)}")
        rows.append(cells)
    return Differences(tuple(labels), tuple(rows), same)


@dataclass(frozen=True)
class LessonTable:
    """One scenario under every combination: the steps whose outcome differs, and what is said
    of each combination's run as a whole (its Column's summary)."""

    scenario: Scenario
    differences: Differences
    summaries: tuple[str, ...]
    met: bool  # every expectation met under every combination
