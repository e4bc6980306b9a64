"""What every engine's DSN and connections share: the variable a DSN may come from, the
bounds on connecting and answering, and the checks any DSN needs before its engine reads it."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..errors import UsageError

DSN_ENV = "JOBQUEUE_DEMO_DSN"
CONNECT_TIMEOUT_S = 5
# How long any one answer may take on a connection that names no bound of its own; the
# runner gives its connections the step timeout instead.
ANSWER_TIMEOUT_S = 60.0


def split_dsn(dsn: str, form: str):
    """(urlsplit parts, port) of a DSN of any engine, with the checks every one needs."""
    try:
        parts = urlsplit(dsn)
        port = parts.port
    except ValueError:
        raise UsageError(f"cannot read the DSN's host and port: expected {form}") from None
    # An unencoded '/', '?' or '#' in the password ends the host part early and
    # leaves the '@' behind it; then parts of the password would land in the
    # host, path or options and could be echoed.
    if "@" in parts.path + parts.query + parts.fragment:
        raise UsageError(
            "cannot read the DSN's user and password: percent-encode '/', '?', '#' and '@' in them"
        )
    if parts.fragment:
        raise UsageError("unexpected '#' in the DSN")
    if port == 0:
        raise UsageError("the DSN's port must be from 1 to 65535")
    return parts, port


def refuse_nul(*values: str | None) -> None:
    # The client libraries take C strings: a NUL would cut a value short, or fail deep inside.
    if any("\0" in (value or "") for value in values):
        raise UsageError("the DSN holds a NUL character (%00)")


def scheme_of(dsn: str) -> str:
    """The scheme a DSN starts with, lower-cased ("" when it has none): what names its engine."""
    scheme, sep, _ = dsn.strip().partition("://")
    return scheme.lower() if sep else ""
