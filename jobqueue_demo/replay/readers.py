"""The registry of deadlock report readers: which engine printed a report, and its reader.
A reader is a module with `ENGINE` (the engine registry's name), `detect(text)` and
`read(path, text)`; a new report form is a module and one entry here."""

from __future__ import annotations

from importlib import import_module

from ..errors import ReportError
from .report import DeadlockReport, checked_size

# name -> module of this package; tried in this order
READERS = {"innodb": "innodb", "postgresql-log": "postgresql_log"}


def read_report(path: str, data: bytes) -> DeadlockReport:
    text = checked_size(path, data)
    for module_name in READERS.values():
        module = import_module(f"{__package__}.{module_name}")
        if module.detect(text):
            return module.read(path, text)
    raise ReportError(path, "not a deadlock report this reads: expected InnoDB's LATEST DETECTED DEADLOCK section "
                      "(MariaDB 10.6+, MySQL 8.0/8.4) or PostgreSQL's 'ERROR:  deadlock detected' log lines")
