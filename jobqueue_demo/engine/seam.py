"""The engine seam: what run/, explore/, workers/ and the API ask of a server's engine, typed
once, and the one registry of engines.

Each engine is a package (mysql/, postgresql/, and galera/ for a MariaDB Galera cluster) whose
`engine.py` implements `Engine`; nothing here is inherited, the Protocols only say what the
callers may count on. `ServerInfo.seam` is the engine of the server a command runs on, so
callers never test which engine they have. The registry's loaders import an engine's package
where they are called: a run pays only for the engine it uses, and no engine imports this
module (the import graph stays one way: seam -> engines -> types).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from ..errors import UsageError
from . import mysql, postgresql
from .deadlines import uninterrupted as uninterrupted  # a clean-up a stop signal must not cut in two (run/connections.py)
from .dsn import DSN_ENV, scheme_of
from .owner import hold_for_life as hold_for_life  # the workers' temp dir, kept from sweeps while they live
from .session import Session as Session  # the base every engine's session extends: the seam's session type
from .types import DeadlockCycle, Result, ServerInfo, Survey, TrxStatus, WaitInfo

if TYPE_CHECKING:  # the workers' queue and a cluster's values: loaded where a run uses them
    from .galera.node import FlowControl as FlowControl
    from .galera.queue import NodeState as NodeState
    from .queue_sql import QueueEngine as Queue


class Dialect(Protocol):
    """The SQL that differs between servers, as text the caller sends."""

    def isolation_setting(self, level: str) -> str: ...
    def row_lock_timeout(self, seconds: int) -> str: ...
    def metadata_lock_timeout(self, seconds: int) -> str: ...
    def set_session(self, settings: list[str]) -> str: ...
    def kill_statement(self, thread_id: int) -> str: ...
    def kill_connection(self, thread_id: int) -> str: ...
    def literal(self, text: str) -> str: ...


class ConnectParams(Protocol):
    """Where and as whom to connect, as a DSN names it."""

    def display(self) -> str: ...
    def connect(self, database: str | None = ..., answer_timeout: float = ...) -> object: ...


class WaitMonitor(Protocol):
    """Who waits for whom, asked of the server on the tool's control connection."""

    counts_row_locks: bool  # whether the server counts each transaction's row locks (InnoDB does)

    def blocked(self, thread_ids: list[int]) -> dict[int, str]: ...
    def in_cycle(self, thread_ids: list[int]) -> bool: ...
    def alive(self, thread_id: int) -> bool: ...
    def transactions(self) -> dict[int, TrxStatus]: ...
    def describe(self, thread_id: int, kind: str, schema: str) -> WaitInfo: ...
    def describe_from_lock_tables(self, thread_id: int) -> WaitInfo: ...
    def record_locks_held(self) -> dict[int, int]: ...


class Scratch(Protocol):
    """A run's scratch database, its control connection `conn` and, confined, its per-run user."""

    name: str
    conn: object
    session_params: ConnectParams

    def open(self) -> None: ...
    def recreate(self) -> None: ...
    def execute(self, sql: str) -> None: ...
    def rows(self, sql: str) -> tuple: ...
    def close(self, quiet: bool = False) -> None: ...
    # Let the per-run user SET these superuser-only settings, as an isolation spec does.
    def let_role_set(self, parameters: tuple[str, ...]) -> None: ...


class TableSnapshot(Protocol):
    """Explore's reset: the tables' rows copied once, restored between schedules."""

    how: str

    def restore(self) -> None: ...
    def may_write(self, sql: str) -> bool: ...  # whether a restore is needed after `sql` ran


class ServerVariables(Protocol):
    """Server variables as --matrix sets them (run/matrix.py); a refusal is a ControlError."""

    def assignment(self, name: str, literal: str) -> str: ...
    def set_session(self, conn: object, assignment: str) -> None: ...
    def global_value(self, conn: object, name: str) -> str | None: ...
    def set_global(self, conn: object, name: str, literal: str) -> None: ...
    def globals(self, conn: object) -> dict[str, str]: ...


class ClusterRun(Protocol):
    """What a run does across a cluster's nodes beyond one server's (galera/run_nodes.py)."""

    def watch(self, monitor: WaitMonitor) -> WaitMonitor: ...
    def check_replicable(self, path: str) -> None: ...
    def connect(self, name: str, node: int, settings_sql: str | None) -> Session: ...
    def mark_causes(self) -> None: ...
    def rollback_cause(self, session: Session) -> str | None: ...
    def catch_up(self) -> None: ...
    def settle_before_reset(self) -> None: ...
    def before_statement(self, session: Session, sql: str) -> None: ...
    def execute_on_node(self, run_id: int, statement: Callable[[int], str]) -> None: ...
    def control_ids(self) -> dict[int, str]: ...
    def close(self) -> None: ...


class Engine(Protocol):
    """One engine, as everything above engine/ sees it."""

    name: str  # the registry's name, what a lesson's per-engine parts are keyed by

    @property
    def errors(self) -> ModuleType: ...
    def dialect(self, server: ServerInfo) -> Dialect: ...
    def parse_dsn(self, dsn: str) -> ConnectParams: ...
    def server_info(self, params: ConnectParams, embedded: bool) -> ServerInfo: ...
    def embedded(self, options: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[ServerInfo]: ...
    def sweep(self, params: ConnectParams, dry_run: bool = False): ...
    def confines(self, server: ServerInfo) -> bool: ...
    def scratch(self, server: ServerInfo, confine: bool = ..., answer_timeout: float = ..., several_statements: bool = False) -> Scratch: ...
    def queue(self) -> Queue: ...
    def wait_monitor(self, control_conn: object, server: ServerInfo) -> WaitMonitor: ...
    def user_connection(self, scratch: Scratch, answer_timeout: float) -> object: ...
    def session(self, name: str, scratch: Scratch, settings_sql: str | None, answer_timeout: float) -> Session: ...
    def reset_session(self, session: Session, scratch: Scratch, settings_sql: str | None) -> bool: ...
    def reset_sessions(self, sessions: list[tuple[Session, str | None]], scratch: Scratch) -> list[bool]: ...
    def run_script(self, conn: object, sql: str) -> str | None: ...
    def answer(self, conn: object, sql: str) -> Result: ...
    def execute(self, conn: object, sql: str) -> None: ...
    def connection_id(self, conn: object) -> int: ...
    def lock_table(self, monitor: WaitMonitor, database: str, sessions: dict[int, str]): ...
    def read_deadlock(self, monitor: WaitMonitor, database: str, names: dict[int, str], victim: int) -> DeadlockCycle | None: ...
    def survey(self, scratch: Scratch, steps=()) -> Survey: ...
    def snapshot(self, scratch: Scratch, tables: tuple[str, ...], writer: object) -> TableSnapshot: ...
    def variables(self) -> ServerVariables | None: ...
    def create_statements(self, params: ConnectParams, tables: tuple[str, ...]) -> str: ...
    def cluster_run(self, server: ServerInfo, scratch: Scratch, answer_timeout: float, nodes: set[int]) -> ClusterRun | None: ...


@dataclass(eq=False)
class EngineEntry:
    """One engine of the registry: its name, the DSN schemes that name it, and its loader."""

    name: str
    title: str  # how messages name it
    schemes: tuple[str, ...]
    dsn_form: str
    load: Callable[[], Engine]


def _mysql() -> Engine:
    from .mysql.engine import ENGINE

    return ENGINE


def _postgresql() -> Engine:
    from .postgresql.engine import ENGINE

    return ENGINE


ENGINES: dict[str, EngineEntry] = {
    entry.name: entry
    for entry in (
        EngineEntry(mysql.NAME, mysql.TITLE, mysql.SCHEMES, mysql.DSN_FORM, _mysql),
        EngineEntry(postgresql.NAME, postgresql.TITLE, postgresql.SCHEMES, postgresql.DSN_FORM, _postgresql),
    )
}
ENGINE_NAMES = tuple(ENGINES)
DEFAULT_ENGINE = mysql.NAME


def entry_of(name: str) -> EngineEntry:
    """The registry's entry for an engine name; a name it lacks is a usage error."""
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}: expected {' or '.join(ENGINE_NAMES)}")
    return ENGINES[name]


def seam_of(name: str) -> Engine:
    return entry_of(name).load()


def entry_of_dsn(dsn: str) -> EngineEntry:
    """The engine a DSN's scheme names."""
    scheme = scheme_of(dsn)
    found = next((e for e in ENGINES.values() if scheme in e.schemes), None)
    if found is None:
        forms = ", or ".join(e.dsn_form for e in ENGINES.values())
        raise UsageError(f"not a server DSN: expected {forms}")
    return found


def seam_of_dsn(dsn: str) -> Engine:
    return entry_of_dsn(dsn).load()


@contextlib.contextmanager
def told_as_env(from_env: bool) -> Iterator[None]:
    """A DSN refused, said to be $JOBQUEUE_DEMO_DSN's when no --dsn was given: the reader would
    look for the mistake on the command line."""
    try:
        yield
    except UsageError as exc:
        if not from_env:
            raise
        raise UsageError(f"${DSN_ENV}: {exc}") from None


@contextlib.contextmanager
def open_server(dsn: str | None = None, engine: str | None = None) -> Iterator[ServerInfo]:
    """The server to run lessons on: `dsn`, else $JOBQUEUE_DEMO_DSN, else an embedded one of
    `engine` (MariaDB/MySQL when None). A DSN names its engine by its scheme (mysql://,
    postgresql://); $JOBQUEUE_DEMO_DSN of another engine than the one asked for is not used."""
    if engine is not None:
        entry_of(engine)
    given = dsn
    if dsn is None:
        dsn = os.environ.get(DSN_ENV) or None
        # A scheme no engine has counts as the default engine's: its DSN is then refused as one.
        named = next((e.name for e in ENGINES.values() if scheme_of(dsn or "") in e.schemes), DEFAULT_ENGINE)
        if dsn and engine is not None and named != engine:
            dsn = None
    if dsn is not None:
        with told_as_env(given is None):
            seam = seam_of_dsn(dsn)
            params = seam.parse_dsn(dsn)
        yield seam.server_info(params, embedded=False)
        return
    # A run on a DSN never starts one, nor imports what would (start-up, docs/architecture.md).
    with seam_of(engine or DEFAULT_ENGINE).embedded() as server:
        yield server
