"""The deadlock reports shipped with the package (reports/), made from real deadlocks
(tests/reports/make_reports.py): `replay NAME` finds one, with its schema and rows beside it
(NAME.schema.sql, NAME.rows.sql)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ReportError

SUFFIXES = (".txt", ".log")


def reports_dir() -> Path:
    """The installed package data, else a checkout's reports/ (never both, as for lessons)."""
    here = Path(__file__).resolve().parent.parent
    installed = here / "reports"
    return installed if installed.is_dir() else here.parent / "reports"


def names() -> list[str]:
    return sorted(p.stem for p in reports_dir().iterdir() if p.suffix in SUFFIXES)


def resolve(name: str) -> str:
    """A report's path: `name` itself when it is a file, else the shipped report of that name."""
    if os.path.exists(name) or os.sep in name:
        return name
    for suffix in SUFFIXES:
        shipped = reports_dir() / f"{name}{suffix}"
        if shipped.is_file():
            return str(shipped)
    raise ReportError(name, f"no such file, and no shipped report of that name (the shipped ones: {', '.join(names())})")


def beside(report: str, kind: str) -> str | None:
    """A shipped report's schema or rows file (`kind`: "schema", "rows"); None for a report of the user's."""
    path = Path(report)
    if path.resolve().parent != reports_dir().resolve():
        return None
    found = path.with_name(f"{path.stem}.{kind}.sql")
    return str(found) if found.is_file() else None
