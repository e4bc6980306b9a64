"""PostgreSQL: imports nothing of the MySQL engine.

Only the registry's facts live here, so that naming an engine loads nothing of it; engine.py
is the seam's implementation (seam.py's Engine)."""

NAME = "postgresql"
TITLE = "PostgreSQL"
SCHEMES = ("postgresql", "postgres")
DSN_FORM = "postgresql://user:password@host:port/database"
