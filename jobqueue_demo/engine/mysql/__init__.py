"""MariaDB and MySQL: one engine, their differences in dialect.py and waits.py.

Only the registry's facts live here, so that naming an engine loads nothing of it; engine.py
is the seam's implementation (seam.py's Engine)."""

NAME = "mysql"
TITLE = "MariaDB/MySQL"
SCHEMES = ("mysql", "mariadb")
DSN_FORM = "mysql://user:password@host:port/database"
