"""DSN handling and both kinds of server, all against real servers."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import MySQLdb
import pytest

from jobqueue_demo.engine.dsn import DSN_ENV
from jobqueue_demo.engine.mysql import embedded as embedded_module
from jobqueue_demo.engine.mysql.embedded import EmbeddedServer, ServerBinary, ensure_template, find_server_binary
from jobqueue_demo.engine.mysql.server import ConnectParams, parse_dsn, parse_version
from jobqueue_demo.engine.seam import open_server
from jobqueue_demo.errors import ServerError, UsageError

REPO = Path(__file__).resolve().parent.parent
LOCAL_DSN = "mysql://root@127.0.0.1:3306"
SECRET = "Hunter2Secret"


def rows(conn, sql: str) -> list[tuple[str | None, ...]]:
    cursor = conn.cursor()
    cursor.execute(sql)
    found = cursor.fetchall()
    cursor.close()
    return [tuple(v.decode() if isinstance(v, bytes) else v for v in row) for row in found]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def alive(pid: int) -> bool:
    # A zombie is dead for our purposes; os.kill(pid, 0) would still succeed on it.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# --- DSNs ----------------------------------------------------------------------


def test_parse_full_dsn():
    params = parse_dsn(f"mysql://alice:{SECRET}%40x@db.example:3307/shop")
    assert params == ConnectParams(
        host="db.example", port=3307, user="alice", password=f"{SECRET}@x", database="shop"
    )


def test_parse_defaults_and_mariadb_scheme():
    assert parse_dsn("mariadb://127.0.0.1") == ConnectParams(
        host="127.0.0.1", port=3306, user="root", password="", database=None, unix_socket=None
    )


def test_parse_url_encoded_user_and_password():
    params = parse_dsn("mysql://j%C3%B6rg%3Aadmin:p%2Fa%3Fs%23s@h/db%20one")
    assert (params.user, params.password, params.database) == ("jörg:admin", "p/a?s#s", "db one")


def test_parse_unix_socket():
    params = parse_dsn("mysql://root@localhost/test?unix_socket=/run/my%2Bsql/mysqld.sock")
    assert params.unix_socket == "/run/my+sql/mysqld.sock"
    assert params.display() == "root@localhost/test?unix_socket=/run/my+sql/mysqld.sock"
    assert parse_dsn("mysql://?unix_socket=/s.sock").display() == "root@localhost?unix_socket=/s.sock"


def test_display_forms():
    assert parse_dsn("mysql://root@127.0.0.1:3306/test").display() == "root@127.0.0.1:3306/test"
    assert parse_dsn("mysql://root@127.0.0.1").display() == "root@127.0.0.1:3306"
    assert parse_dsn("mysql://u@[::1]:3307").display() == "u@[::1]:3307"


def test_password_never_shown():
    params = parse_dsn(f"mysql://root:{SECRET}@127.0.0.1:3306/test")
    assert params.password == SECRET
    for text in (params.display(), repr(params), str(params)):
        assert SECRET not in text


@pytest.mark.parametrize(
    "dsn",
    [
        "",
        "garbage",
        f"root:{SECRET}@localhost",
        f"postgres://root:{SECRET}@localhost/db",
        f"mysql:root:{SECRET}@localhost",
        f"mysql://root:{SECRET}@h:port/db",
        f"mysql://root:{SECRET}@h:70000",
        f"mysql://root:{SECRET}@h:0",
        f"mysql://root:{SECRET}@h/db/extra",
        f"mysql://root:{SECRET}@h/db?sslmode=require",
        f"mysql://root:{SECRET}@h?unix_socket=/a&unix_socket=/b",
        f"mysql://root:{SECRET}@/db",
        f"mysql://root:{SECRET}@[::1/db",
        f"mysql://root:{SECRET}@h/db#frag",
        # Unencoded '/', '?', '#' in the password: must not leak into host, path or options.
        "mysql://root:Hunter2/Secret@h/db",
        "mysql://root:1234/Hunter2Secret@h/db",
        "mysql://root:1234?Hunter2Secret@h/db",
        "mysql://root:Hunter2#Secret@h/db",
    ],
)
def test_bad_dsn_is_usage_error_without_password(dsn):
    with pytest.raises(UsageError) as caught:
        parse_dsn(dsn)
    message = str(caught.value)
    assert message and "\n" not in message
    assert "Hunter2" not in message and "Secret" not in message


# --- versions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("10.11.19-MariaDB-0+deb12u1", ("MariaDB", "10.11.19")),
        ("5.5.5-10.6.12-MariaDB-log", ("MariaDB", "10.6.12")),
        ("8.4.3", ("MySQL", "8.4.3")),
        ("8.0.36-28", ("MySQL", "8.0.36")),
        ("Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)", ("MariaDB", "10.11.19")),
        ("Ver 8.4.3 for Linux on x86_64 (MySQL Community Server - GPL)", ("MySQL", "8.4.3")),
    ],
)
def test_parse_version(text, expected):
    assert parse_version(text) == expected


def test_unparseable_version_is_server_error():
    with pytest.raises(ServerError):
        parse_version("banana")


def test_template_key_follows_version_output():
    path = Path("/usr/sbin/mariadbd")
    old = ServerBinary(path, "Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu", "MariaDB", "10.11.19")
    rebuilt = ServerBinary(path, "Ver 10.11.19-MariaDB-0+deb12u2 for debian-linux-gnu", "MariaDB", "10.11.19")
    assert old.template_key != rebuilt.template_key
    assert old.template_key.startswith("mariadb-10.11.19-")


# --- a server named by a DSN ---------------------------------------------------


@pytest.fixture(scope="session")
def local_server() -> str:
    try:
        parse_dsn(LOCAL_DSN).connect().close()
    except ServerError as exc:
        pytest.skip(f"no local server for DSN tests: {exc}")
    return LOCAL_DSN


def test_open_server_with_dsn(local_server):
    with open_server(local_server) as info:
        assert not info.embedded
        assert info.flavor in ("MariaDB", "MySQL")
        assert info.label == f"{info.flavor} {info.version}"
        assert info.where == "root@127.0.0.1:3306"
        conn = info.params.connect()
        try:
            assert rows(conn, "SELECT @@autocommit, VERSION()")[0][0] == "1"
            assert info.version in rows(conn, "SELECT VERSION()")[0][0]
        finally:
            conn.close()


def test_open_server_reads_env(local_server, monkeypatch):
    monkeypatch.setenv(DSN_ENV, local_server)
    with open_server(None) as info:
        assert not info.embedded
        assert info.params == parse_dsn(local_server)


def test_connect_returns_server_text_and_single_statements(local_server):
    params = parse_dsn(local_server + "/information_schema")
    conn = params.connect()
    try:
        assert rows(conn, "SELECT DATABASE(), 1.50") == [("information_schema", "1.50")]
        with pytest.raises(MySQLdb.ProgrammingError) as caught:
            rows(conn, "SELECT 1; SELECT 2")
        assert caught.value.args[0] == 1064
    finally:
        conn.close()
    conn = params.connect(database=None, multi_statements=True)
    try:
        assert rows(conn, "SELECT DATABASE(); SELECT 2") == [(None,)]
    finally:
        conn.close()


def test_unreachable_server_fails_fast_without_password():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(ServerError) as caught:
        with open_server(f"mysql://root:{SECRET}@127.0.0.1:{port}"):
            pass
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert message.startswith(f"cannot connect to root@127.0.0.1:{port}: ")
    assert "\n" not in message and SECRET not in message


# --- the embedded server -------------------------------------------------------


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory) -> Path:
    # One template per test session, never the user's own cache.
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def server_binary() -> ServerBinary:
    try:
        return find_server_binary()
    except ServerError as exc:
        pytest.skip(f"no server binary for embedded tests: {exc}")


@pytest.fixture
def embedded_env(cache_home, server_binary, server_tmp, monkeypatch) -> Path:
    """The temp root the embedded servers' work dirs go into, empty at start."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.delenv(DSN_ENV, raising=False)
    work_root = server_tmp
    monkeypatch.setenv("TMPDIR", str(work_root))
    # tempfile caches the temp dir it chose first; make it look at TMPDIR again.
    monkeypatch.setattr(tempfile, "tempdir", None)
    return work_root


def assert_gone(work_root: Path, pid: int) -> None:
    assert list(work_root.iterdir()) == []
    assert not alive(pid)


def server_pid(server: EmbeddedServer) -> int:
    return int((server.workdir / "mysqld.pid").read_text())


def test_embedded_server_runs_on_socket_only(embedded_env):
    with EmbeddedServer() as server:
        pid = server_pid(server)
        params = server.params
        assert params.unix_socket and Path(params.unix_socket).is_socket()
        assert (params.user, params.password) == ("root", "")
        conn = params.connect()
        try:
            assert rows(conn, "SELECT @@skip_networking, @@autocommit") == [("1", "1")]
            if server.binary.flavor == "MariaDB":
                status = rows(
                    conn,
                    "SELECT PLUGIN_STATUS FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO'",
                )
                assert status == [("ACTIVE",)]
        finally:
            conn.close()
    assert_gone(embedded_env, pid)


def test_open_server_defaults_to_embedded(embedded_env):
    with open_server() as info:
        assert info.embedded
        assert info.params.unix_socket
        assert info.where == "embedded throwaway server"
        assert info.flavor in ("MariaDB", "MySQL")
    assert list(embedded_env.iterdir()) == []


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_embedded_server_cleans_up_after_exception(embedded_env, error):
    with pytest.raises(error):
        with EmbeddedServer() as server:
            pid = server_pid(server)
            # Left open mid-transaction: stopping must not wait for it.
            conn = server.params.connect()
            rows(conn, "BEGIN")
            rows(conn, "SELECT COUNT(*) FROM mysql.user")
            raise error()
    assert_gone(embedded_env, pid)


def test_template_is_reused(embedded_env, cache_home, server_binary):
    template = ensure_template(server_binary)
    before = (template.datadir.stat().st_ino, (template.datadir.parent / "template.json").stat().st_mtime_ns)
    entries = sorted(p.name for p in (cache_home / "jobqueue-demo").iterdir())
    with EmbeddedServer():
        pass
    after = ensure_template(server_binary)
    assert (after.datadir.stat().st_ino, (after.datadir.parent / "template.json").stat().st_mtime_ns) == before
    assert sorted(p.name for p in (cache_home / "jobqueue-demo").iterdir()) == entries


def test_server_that_fails_to_start_reports_its_log(embedded_env, monkeypatch):
    monkeypatch.setattr(embedded_module, "BUFFER_POOL_SIZE", "nonsense")
    with pytest.raises(ServerError) as caught:
        with EmbeddedServer():
            pass
    message = str(caught.value)
    assert "\n" not in message
    assert "exited with code" in message and "innodb-buffer-pool-size" in message
    assert list(embedded_env.iterdir()) == []


def test_too_long_socket_path_is_server_error(embedded_env, monkeypatch):
    deep = embedded_env / ("d" * 100)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    with pytest.raises(ServerError, match="too long"):
        EmbeddedServer().start()
    assert list(deep.iterdir()) == []


def run_python(code: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )


def test_concurrent_first_runs_share_one_template(tmp_path, server_binary):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = (
        "from jobqueue_demo.engine.mysql.embedded import ensure_template, find_server_binary\n"
        "print(ensure_template(find_server_binary()).datadir)\n"
    )
    children = [run_python(code, env) for _ in range(2)]
    outputs = [child.communicate(timeout=120)[0].strip() for child in children]
    assert [child.returncode for child in children] == [0, 0]
    assert outputs[0] == outputs[1]
    cache = tmp_path / "jobqueue-demo"
    assert sorted(p.name for p in cache.iterdir()) == [server_binary.template_key, f"{server_binary.template_key}.lock"]
    assert (Path(outputs[0]) / "mysql").is_dir()
    assert (Path(outputs[0]).parent / "template.json").is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_server_dies_with_killed_python(embedded_env):
    code = (
        "import sys, time\n"
        "from jobqueue_demo.engine.mysql.embedded import EmbeddedServer\n"
        "server = EmbeddedServer()\n"
        "server.start()\n"
        "print(server.workdir, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = run_python(code, {**os.environ})
    workdir = None
    try:
        line = child.stdout.readline().strip()
        assert line, "the child printed no work dir"
        workdir = Path(line)
        pid = int((workdir / "mysqld.pid").read_text())
        assert alive(pid)
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid)
    finally:
        child.kill()
        child.wait()
        # A SIGKILLed Python cannot clean up after itself; the work dir is left.
        # Only ever a run's own directory: an empty line would be Path(''), the checkout itself.
        if workdir is not None and workdir.name.startswith("jobqueue-demo-"):
            shutil.rmtree(workdir, ignore_errors=True)


def test_atexit_stops_a_server_left_running(embedded_env):
    code = (
        "from jobqueue_demo.engine.mysql.embedded import EmbeddedServer\n"
        "server = EmbeddedServer()\n"
        "server.start()\n"
        "print((server.workdir / 'mysqld.pid').read_text())\n"
    )
    child = run_python(code, {**os.environ})
    output, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    # The death signal alone would end the server too, but only atexit removes the work dir.
    assert_gone(embedded_env, int(output))
