"""The throwaway servers run as no OS user that owns anything else, and let nobody but the tool
in as their root or superuser: not another local user, not a program the server itself runs
(what a scenario that got superuser would use), not over a Galera node's TCP port."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from conftest import cli, skip_without_pg

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the servers run as a user of their own only when we are root")

MACHINE_PG_SOCKET = Path("/var/run/postgresql/.s.PGSQL.5432")


def owner_of(pid: int) -> pwd.struct_passwd:
    """The OS user a process runs as (its effective uid, from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return pwd.getpwuid(int(line.split()[2]))
    raise AssertionError(f"no Uid line for process {pid}")


def assert_runs_as_the_server_user(pid: int) -> None:
    from jobqueue_demo.engine.os_user import NOLOGIN, SERVER_USER

    user = owner_of(pid)
    assert user.pw_name == SERVER_USER
    # It can log in nowhere, and has no home to own.
    assert user.pw_shell == NOLOGIN and not Path(user.pw_dir).exists()


def mysql_value(info, sql: str) -> str:
    with closing(info.params.connect()) as conn:
        return mysql_value_on(conn, sql)


def as_user(user: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", *command], capture_output=True, text=True, timeout=30)


def test_the_embedded_mariadb_runs_as_its_own_user_and_root_logs_in_from_the_tool_only(embedded):
    server = int(Path(mysql_value(embedded, "SELECT @@pid_file")).read_text())
    # As the server's own OS user (what a program it ran would be), and as any other user.
    for user in (owner_of(server).pw_name, "nobody"):
        done = as_user(user, "mariadb", "-uroot", f"--socket={embedded.params.unix_socket}", "-e", "SELECT 1")
        assert done.returncode != 0, f"{user} logged in as root"
    assert_runs_as_the_server_user(server)


def test_no_galera_node_runs_as_root_nor_lets_another_user_in_as_root(galera_cluster):
    for node in galera_cluster.nodes:
        done = as_user("nobody", "mariadb", "-h127.0.0.1", f"-P{node.port}", "-uroot", "-e", "SELECT 1")
        assert done.returncode != 0 and "Access denied" in done.stderr, f"nobody logged in to node{node.number}"
        assert_runs_as_the_server_user(node.process.pid)


def test_no_local_user_can_join_the_galera_cluster_by_its_name(galera_cluster):
    """Galera lets any process reaching a node's group port join and receive every write set
    if it gives the cluster's name: a random one, in no process's command line."""
    names = set()
    for node in galera_cluster.nodes:
        with closing(node.params.connect()) as conn:
            name = mysql_value_on(conn, "SELECT @@wsrep_cluster_name")
        names.add(name)
        assert name.startswith("jobqueue-demo-") and len(name) == 30, name
        assert name.encode() not in Path(f"/proc/{node.process.pid}/cmdline").read_bytes()
        options = node.workdir / "galera.cnf"
        assert options.stat().st_mode & 0o077 == 0
    assert len(names) == 1  # one cluster


def mysql_value_on(conn, sql: str) -> str:
    from jobqueue_demo.engine.mysql import control

    return control.text(control.rows(conn, sql)[0][0])


def copy_to_program(info, program: str) -> str | None:
    """What a superuser scenario would do: run `program` as the server's OS user. The error, or
    None when the program succeeded."""
    from jobqueue_demo.engine.postgresql.control import literal
    from jobqueue_demo.engine.postgresql.session import answer

    with closing(info.params.connect()) as conn:
        result = answer(conn, f"COPY (SELECT 1) TO PROGRAM {literal(program)}")
    return result.error.libpq_text if result.error else None


def test_the_embedded_postgresql_runs_as_its_own_user(pg_embedded):
    from jobqueue_demo.engine.postgresql import control as pg_control

    with closing(pg_embedded.params.connect()) as conn:
        assert_runs_as_the_server_user(int(pg_control.value(conn, "SELECT pg_backend_pid()")))


def psql() -> str:
    found = shutil.which("psql")
    if found is None:
        pytest.skip("no psql")
    return found


def test_a_program_the_embedded_postgresql_runs_cannot_log_in_to_it_as_superuser(pg_embedded):
    own = f"{psql()} -h {pg_embedded.params.socket_dir} -U postgres -d postgres -c 'SELECT 1'"
    assert "exit code 2" in (copy_to_program(pg_embedded, own) or "it logged in as the superuser")


def test_a_program_the_embedded_postgresql_runs_cannot_log_in_to_the_machines_cluster(pg_embedded):
    if not MACHINE_PG_SOCKET.exists():
        pytest.skip(f"no PostgreSQL of the machine's at {MACHINE_PG_SOCKET.parent}")
    # Peer authentication: the role named after the server's OS user (`postgres` was superuser there).
    machine = f"{psql()} -h {MACHINE_PG_SOCKET.parent} -d postgres -c 'SELECT 1'"
    assert "exit code 2" in (copy_to_program(pg_embedded, machine) or "it logged in to the machine's cluster")


def test_a_run_dir_the_server_user_cannot_enter_is_one_line_and_left_clean():
    folder = Path(tempfile.mkdtemp(prefix="jqd-test-private-"))  # mode 0700, root's
    try:
        done = cli("run", "skip-locked", env={"TMPDIR": str(folder)})
        assert done.returncode == 3 and "point TMPDIR at a directory it can enter" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert list(folder.iterdir()) == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.server  # builds the templates: starts servers through the engine's own code
def test_the_cached_templates_stay_ours(tmp_path, monkeypatch):
    """The servers' user owns no file of a template every later run starts from."""
    from jobqueue_demo.engine.galera import cluster
    from jobqueue_demo.engine.mysql import embedded
    from jobqueue_demo.engine.postgresql import embedded as pg_server
    from jobqueue_demo.errors import ServerError

    skip_without_pg()
    try:
        provider = cluster.find_provider()
    except ServerError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cluster.ensure_cluster_template(embedded.find_server_binary(), provider)  # the plain one too
    pg_server.ensure_template(pg_server.find_binaries())
    owners = {path.lstat().st_uid for path in [tmp_path, *tmp_path.rglob("*")]}
    assert owners == {os.geteuid()}


def test_the_server_user_is_made_once_when_missing():
    from jobqueue_demo.engine.os_user import NOLOGIN, ensure_user

    name = "jqd-test-" + os.urandom(4).hex()
    try:
        made = ensure_user(name)
        assert made.pw_shell == NOLOGIN and not Path(made.pw_dir).exists()
        assert made.pw_uid < 1000  # a system user
        assert ensure_user(name) == made
    finally:
        subprocess.run(["userdel", name], capture_output=True)
