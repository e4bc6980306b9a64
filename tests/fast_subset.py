"""The fast subset: tests that reach no server and start no process (`pytest -m fast`).

A test is marked `fast` at collection unless it is marked `server` or its code names one of
REACHES_OUT: the test function, the fixtures it uses and the functions and classes of tests/
those call, read transitively; pytest's code and the package's are not read. So a new test is
classified by what it does, with no list to keep. What the reading cannot see (the CLI run in
this process by conftest's run_cli, reaching a server through the package) is caught when it
runs: in a run of fast tests only, a socket connection, a database driver's connection or a
process start fails the test, naming what it reached.
"""

from __future__ import annotations

import inspect
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Conftest's cli() and examples' run_pasted() say `subprocess`; request.getfixturevalue picks
# a server fixture at run time.
REACHES_OUT = frozenset({
    "subprocess", "pty", "multiprocessing", "fork", "forkpty",
    "open_server", "EmbeddedServer", "EmbeddedPostgres", "EmbeddedCluster", "connect", "create_connection",
    "getfixturevalue",
})
TESTS = Path(__file__).resolve().parent
WHAT_TO_DO = "give it a server fixture or mark it @pytest.mark.server"


def mark(items) -> None:
    verdicts: dict = {}
    for item in items:
        if item.get_closest_marker("server") is None and not _reaches_out_from(item, verdicts):
            item.add_marker(pytest.mark.fast)


def _reaches_out_from(item, verdicts: dict) -> bool:
    if not isinstance(item, pytest.Function):
        return True  # not a test function of ours: nothing to read
    fixtures = [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
    return any(_reaches_out(obj, verdicts) for obj in [item.function, *fixtures])


def _reaches_out(obj, verdicts: dict) -> bool:
    """Whether a function or class of tests/ names one of REACHES_OUT, itself or through the
    functions and classes of tests/ it names."""
    obj = inspect.unwrap(obj)
    if obj not in verdicts:
        verdicts[obj] = False  # a cycle through the suite's own helpers adds nothing
        verdicts[obj] = _in_tests(obj) and any(
            name in REACHES_OUT or (_is_code(where.get(name)) and _reaches_out(where[name], verdicts))
            for names, where in _names(obj) for name in names
        )
    return verdicts[obj]


def _is_code(obj) -> bool:
    return isinstance(obj, type) or (callable(obj) and inspect.isfunction(inspect.unwrap(obj)))


def _in_tests(obj) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return Path(getattr(module, "__file__", None) or "/").parent == TESTS


def _names(obj) -> Iterator[tuple[tuple[str, ...], dict]]:
    """(names, the globals they are looked up in) of a function's code and the code nested in
    it (comprehensions, lambdas, inner functions), or of each method of a class."""
    if isinstance(obj, type):
        for value in vars(obj).values():
            method = getattr(value, "__func__", getattr(value, "fget", value))
            if inspect.isfunction(method):
                yield from _names(method)
        return
    stack = [obj.__code__] if hasattr(obj, "__code__") else []
    while stack:
        code = stack.pop()
        yield code.co_names, obj.__globals__
        stack.extend(c for c in code.co_consts if inspect.iscode(c))


# -- the guard ------------------------------------------------------------------------------

_reached: list[str] | None = None  # what the guarded test reached; None: no guard on
_hook_added = threading.Lock()
AUDITED = {"socket.connect", "subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"}


def _refuse(what: str) -> None:
    # Recorded as well as raised, for code that catches what it raises (a bare except, a
    # worker thread): fail_if_reached() fails the test after it.
    _reached.append(what)
    pytest.fail(f"a fast test must not reach a server or start a process ({what}): {WHAT_TO_DO}", pytrace=False)


def _audit(event: str, args: tuple) -> None:
    if _reached is not None and event in AUDITED:
        _refuse(f"{event} {args[1] if event == 'socket.connect' else args[:1]!r}")


@contextmanager
def inside_only() -> Iterator[list[str]]:
    """Every socket connection and process start fails (pytest.fail, which `except Exception`
    does not catch), the database drivers' connections too: libmariadb and libpq connect in C,
    where no audit event is raised (libpq's own, called through engine/postgresql/libpq.py).
    Yields the list of what was reached."""
    global _reached
    import MySQLdb.connections

    from jobqueue_demo.engine.postgresql import libpq

    def no_postgresql(cls, conninfo: bytes, *args, **kwargs):
        where = dict(re.findall(r"(\w+)='((?:[^'\\]|\\.)*)'", conninfo.decode()))
        _refuse(f"libpq {where.get('host')!r} port {where.get('port')}")

    def no_mysql(self, *args, **kwargs):
        _refuse(f"libmariadb {kwargs.get('unix_socket') or kwargs.get('host')!r}")

    if _hook_added.acquire(blocking=False):
        sys.addaudithook(_audit)  # for good: an audit hook cannot be removed, so it checks _reached
    outer, _reached = _reached, []
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(MySQLdb.connections.Connection, "__init__", no_mysql)
            patch.setattr(libpq.PGconn, "connect", classmethod(no_postgresql))
            yield _reached
    finally:
        _reached = outer


def fail_if_reached() -> None:
    if _reached:
        pytest.fail(f"a fast test must not reach a server or start a process, this one reached {_reached}: {WHAT_TO_DO}",
                    pytrace=False)
