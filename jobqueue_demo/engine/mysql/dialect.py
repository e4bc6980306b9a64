"""The SQL that differs between servers, in one place: what run/ and workers/ ask of an engine.

A second engine (PostgreSQL, say) implements these methods; the driver, the explorer and the
worker crew call them and never spell a server's variable names or KILL statements.
MariaDB before 11.1 names the isolation variable tx_isolation; MySQL 8 and MariaDB 11.1+
transaction_isolation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class MySqlDialect:
    """The SQL that differs between MariaDB and MySQL and their versions."""

    flavor: str  # "MariaDB" or "MySQL"
    version: str
    # What a fault step's kill is done with, as the transcript names it.
    FAULT_CALLS = {"kill": "KILL CONNECTION", "kill-query": "KILL QUERY"}

    @property
    def isolation_variable(self) -> str:
        major_minor = tuple(int(p) for p in self.version.split(".")[:2])
        if self.flavor == "MariaDB" and major_minor < (11, 1):
            return "tx_isolation"
        return "transaction_isolation"

    def isolation_setting(self, level: str) -> str:
        """The `SET SESSION` assignment for a level named as scenarios name it (read-committed)."""
        return f"{self.isolation_variable} = '{level.upper()}'"

    def row_lock_timeout(self, seconds: int) -> str:
        """The assignment bounding a wait for a row lock (InnoDB's own variable)."""
        return f"innodb_lock_wait_timeout = {int(seconds)}"

    def metadata_lock_timeout(self, seconds: int) -> str:
        """The assignment bounding a wait for a table's metadata lock."""
        return f"lock_wait_timeout = {int(seconds)}"

    def set_session(self, settings: list[str]) -> str:
        return "SET SESSION " + ", ".join(settings)

    def kill_statement(self, thread_id: int) -> str:
        return f"KILL QUERY {int(thread_id)}"

    def kill_connection(self, thread_id: int) -> str:
        return f"KILL CONNECTION {int(thread_id)}"

    def literal(self, text: str) -> str:
        """`text` as an SQL string literal (a backslash escapes here)."""
        from .scratch import literal

        return literal(text)
