"""The SQL that differs on PostgreSQL, behind the same methods as dialect.MySqlDialect.

PostgreSQL has one lock timeout for every lock, row or table: both of a scenario's timeouts
(`innodb_lock_wait_timeout`, `lock_wait_timeout`) become `lock_timeout` there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PgDialect:
    flavor: str  # "PostgreSQL"
    version: str
    FAULT_CALLS = {"kill": "pg_terminate_backend", "kill-query": "pg_cancel_backend"}

    def isolation_setting(self, level: str) -> str:
        """The session default for a level named as scenarios name it (read-committed)."""
        return f"SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {level.replace('-', ' ').upper()}"

    def row_lock_timeout(self, seconds: int) -> str:
        return f"lock_timeout = '{int(seconds)}s'"

    def metadata_lock_timeout(self, seconds: int) -> str:
        return f"lock_timeout = '{int(seconds)}s'"

    def set_session(self, settings: list[str]) -> str:
        # PostgreSQL's SET takes one setting; several are sent as one simple-protocol query.
        return "; ".join(f"SET {s}" for s in settings)

    def kill_statement(self, pid: int) -> str:
        return f"SELECT pg_cancel_backend({int(pid)})"

    def kill_connection(self, pid: int) -> str:
        return f"SELECT pg_terminate_backend({int(pid)})"

    def literal(self, text: str) -> str:
        """`text` as an SQL string literal (standard_conforming_strings: a backslash is itself)."""
        from .control import literal

        return literal(text)
