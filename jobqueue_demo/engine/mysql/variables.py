"""Server variables as --matrix sets them (run/matrix.py): by their MariaDB/MySQL names, in
the session, globally on the embedded server, or as options of a server started with them."""

from __future__ import annotations

from . import control
from .server import keeping_no_dir


class MySqlVariables:
    """Statements on a connection of the tool's own (`conn`); a refusal is a ControlError
    carrying the server's error number, which tells the scope a variable may be set in."""

    def assignment(self, name: str, literal: str) -> str:
        """`name = literal`, sql_mode keeping the NO_DIR_IN_CREATE every session has."""
        return keeping_no_dir(literal) if name.lower() == "sql_mode" else f"{name} = {literal}"

    def set_session(self, conn, assignment: str) -> None:
        control.execute(conn, "SET SESSION " + assignment)

    def global_value(self, conn, name: str) -> str | None:
        return control.value(conn, f"SELECT @@GLOBAL.{name}")

    def set_global(self, conn, name: str, literal: str) -> None:
        control.execute(conn, f"SET GLOBAL {name} = {literal}")

    def globals(self, conn) -> dict[str, str]:
        """Every global variable's value as text, by its name in lower case."""
        return {control.text(n).lower(): control.text(v) or "" for n, v in control.rows(conn, "SHOW GLOBAL VARIABLES")}
