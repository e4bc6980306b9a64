"""psycopg connections that carry their own bound on an answer.

Imported where the first connection opens: psycopg is not part of start-up.
"""

from __future__ import annotations

import psycopg

from ..dsn import ANSWER_TIMEOUT_S


class BoundedConnection(psycopg.Connection):
    """A psycopg connection whose answers the tool waits for at most `answer_timeout` seconds
    (control.py, session.py: libpq is driven directly, without psycopg's own waits)."""

    answer_timeout: float = ANSWER_TIMEOUT_S
    # Why the tool gave up on the connection (an answer that never came), for the clean-up.
    dropped: str | None = None
