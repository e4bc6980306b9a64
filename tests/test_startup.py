"""The seed run imports only what it uses: what a deadlock, a stuck run, explore's resets, the
columns view or a dropped connection need is imported where it happens, the other commands'
modules are not imported at all, and rich only when colour is on: all off every plain run's
start-up (bench/bench_seed_vs_mysqltest.py measures the time). And the dataclasses it defines
are the cheap kind (docs/architecture.md, Start-up)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, dsn_of

RARE = (
    "jobqueue_demo.engine.mysql.deadlock",
    "jobqueue_demo.run.chain",
    "jobqueue_demo.run.stuck",
    "jobqueue_demo.engine.mysql.snapshot",
    "jobqueue_demo.engine.galera.node",  # a Galera cluster's paths only
    "jobqueue_demo.render.columns",
    "socket",
    # Other commands: main.py imports only the module of the command asked for.
    "jobqueue_demo.cli.verify",
    "jobqueue_demo.cli.lessons",
    "jobqueue_demo.scenario.catalogue",
    "jobqueue_demo.run.compare",
    "jobqueue_demo.cli.explore",
    "jobqueue_demo.cli.show",
    "jobqueue_demo.cli.workers",
    "jobqueue_demo.workers.strategies",
    "jobqueue_demo.run.matrix",
    # serve's web stack: only `serve` imports it (cli/serve.py, api.serve).
    "jobqueue_demo.cli.serve",
    "jobqueue_demo.serve.web",
    "starlette",
    "uvicorn",
    # The other engine: a MariaDB run reads a DSN's scheme without PostgreSQL's modules.
    "jobqueue_demo.engine.postgresql.server",
    "jobqueue_demo.engine.postgresql.session",
    # The embedded server, on a run with --dsn (engine/mysql/embedded.py), and its template's json;
    # colour (render/color.py).
    "jobqueue_demo.engine.mysql.embedded",
    "json",
    "rich",
)
# A piped seed run, then what is asked of the process it leaves (printed to standard error).
SEED_RUN = """
import sys
from jobqueue_demo.cli import entry
sys.argv = ["jobqueue-demo", "run", sys.argv[1], "--dsn", sys.argv[2]]
try:
    entry()
except SystemExit as e:
    assert not e.code, e.code
"""
MODULES = """
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""
# Each dataclass of the seed run's modules, with what makes it dear to define: frozen (three more
# methods compiled from source), `__eq__` where nothing compares two of them (one more; only the
# values a test compares with a value keep it: a loaded scenario and its parts, parsed
# connection parameters), or no docstring (dataclass makes one with inspect.signature).
DEAR_DATACLASSES = """
import dataclasses, inspect
for name, module in sorted(sys.modules.items()):
    for cls in vars(module).values() if name.startswith("jobqueue_demo") else ():
        if inspect.isclass(cls) and cls.__module__ == name and dataclasses.is_dataclass(cls):
            if cls.__dataclass_params__.frozen:
                print(f"{name}.{cls.__qualname__} frozen", file=sys.stderr)
            compared = name == "jobqueue_demo.scenario.model" or cls.__name__ == "ConnectParams"
            if cls.__dataclass_params__.eq and not compared:
                print(f"{name}.{cls.__qualname__} with __eq__", file=sys.stderr)
            if cls.__doc__.startswith(cls.__name__ + "("):
                print(f"{name}.{cls.__qualname__} without a docstring", file=sys.stderr)
"""


def after_seed_run(server, report: str, **env: str) -> str:
    """What `report` prints in the process of a seed run, after the run."""
    seed = str(ROOT / "scenarios" / "skip-locked.yaml")
    full = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")}
    full.update(env)
    done = subprocess.run(
        [sys.executable, "-c", SEED_RUN + report, seed, dsn_of(server)], capture_output=True, text=True, env=full
    )
    assert done.returncode == 0, done.stderr[-600:]
    return done.stderr


def seed_run_modules(server, **env: str) -> set[str]:
    """The modules a piped seed run has imported when it ends."""
    return set(after_seed_run(server, MODULES, **env).split())


def test_the_seed_run_leaves_the_rare_paths_unimported(embedded):
    loaded = seed_run_modules(embedded)
    assert "jobqueue_demo.run.driver" in loaded
    assert [m for m in RARE if m in loaded] == []


def test_the_seed_run_defines_only_cheap_dataclasses(embedded):
    assert after_seed_run(embedded, DEAR_DATACLASSES).splitlines() == []


def test_rich_paints_the_transcript_when_colour_is_on(embedded):
    assert "rich.console" in seed_run_modules(embedded, FORCE_COLOR="1")
