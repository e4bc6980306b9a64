"""What a scenario session is on every engine: a name, a connection, at most one statement in
flight. Each engine's session (mysql/session.py, postgresql/session.py) sends and reads on its
own client library; the runner drives them all alike, without threads."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from ..errors import FetchTimeout
from .types import Result


@dataclass(eq=False)
class Session(ABC):
    """A named session and its connection; at most one statement in flight. One object per
    connection, so compared by identity."""

    name: str
    conn: object
    thread_id: int
    pending_sql: str | None = None
    sent_at: float = 0.0
    closed: bool = False
    waiting: bool = field(default=False)

    @property
    def busy(self) -> bool:
        return self.pending_sql is not None

    @abstractmethod
    def fileno(self) -> int:
        """The socket the runner waits on for this session's answer."""

    @abstractmethod
    def send(self, sql: str) -> Result | None:
        """Send without waiting; a connection that is already gone answers at once."""

    @abstractmethod
    def _answer(self, fetch_timeout: float) -> Result: ...

    @abstractmethod
    def drop_socket(self) -> None:
        """End the connection the way a crashed process does: no goodbye, no ROLLBACK."""

    def read(self, fetch_timeout: float = float("inf")) -> Result:
        """The answer to the statement in flight; a result that takes longer than
        `fetch_timeout` to arrive drops the connection and raises FetchTimeout."""
        try:
            result = self._answer(fetch_timeout)
        except FetchTimeout as e:
            self.drop_socket()
            self.pending_sql = None
            raise FetchTimeout(f"{e}; {self.name}'s connection was dropped (raise --step-timeout for big results)") from None
        self.pending_sql = None
        self.waiting = False
        if result.error and result.error.error_class == "connection-lost":
            self.closed = True
        return result

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # already closed or dropped: nothing left to release
            pass
        self.closed = True
