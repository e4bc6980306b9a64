"""The `replay` command: a production deadlock report turned into a lesson that reproduces it."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from .. import api
from .shared import StepTimeout, app, fitted, heading


@app.command()
def replay(
    report: str = typer.Argument(..., help="The deadlock report: InnoDB's LATEST DETECTED DEADLOCK section "
                                 "(or the error log's copy), or PostgreSQL's log lines from 'ERROR:  deadlock detected'; "
                                 "or the name of a shipped example (claim-vs-enqueue, reserve-vs-delete, sharelock)."),
    schema: Optional[str] = typer.Option(None, "--schema", help="The CREATE TABLE (and CREATE INDEX) statements of the "
                                         "tables the report's locks are on (a shipped example has its own).", show_default=False),
    rows: Optional[str] = typer.Option(None, "--rows", help="INSERT statements of the rows, in the order they were "
                                       "inserted (default: made from the records an InnoDB report prints, or at the tuples a "
                                       "PostgreSQL report names).", show_default=False),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Where to write the lesson, when it reproduced the "
                                         "deadlock.", show_default=False),
    dsn: Optional[str] = typer.Option(None, "--dsn", help="Read the schema from this database's catalog instead of "
                                      "--schema (mysql://user@host/DATABASE, postgresql://user@host/DATABASE): the tables "
                                      "the report names, no row. The replay still runs on an embedded server.",
                                      show_default=False),
    step_timeout: StepTimeout = 10.0,
) -> None:
    """Read a deadlock report, build the schedule that makes the same cycle, run it on an
    embedded server of the report's engine, and say whether it reproduced: the same
    transactions waiting for the same locks (index, mode, gap or record or insert
    intention), and the same victim. With -o the lesson is written only when it did, its
    expectations recorded; `verify` and `explore` take it. --dsn reads the schema from that
    database's catalog instead of --schema (no row is read; the replay still runs on an
    embedded server). docs/replay.md tells how the schedule is built.

    \b
    Example:
      jobqueue-demo replay reserve-vs-delete -o my-replayed.yaml
      jobqueue-demo replay claim-vs-enqueue
      jobqueue-demo replay sharelock -o my-sharelock.yaml
    """
    path, found = api.read_deadlock_report(report)
    plan = api.replay_plan(found, path, schema, rows, dsn)
    victim = plan.part(found.victim)
    heading(f"-- {plan.source}: a {found.form} report of {len(found.parties)} transactions; "
            f"the server rolled back ({found.victim})", False)
    for part in plan.parts:
        waits = part.party.waits.text() if part.party.waits else "nothing the report prints"
        waits += f" at {part.waits_at}" if part.waits_at else ""
        print(fitted(f"   {part.session} = ({part.party.number}): waited for {waits} in "
                     f"{' '.join(part.statement.split())[:200]}", sys.stdout, "      "))
    with api.private_server(found.engine) as server:
        result = api.replay(plan, server, step_timeout, output)
        print(fitted(f"-- reproduced on {server.label} ({server.where}), schedule {result.tried} of those tried: "
                     f"the same cycle, {victim.session} rolled back", sys.stdout))
    for line in result.cycle:
        print(fitted(line, sys.stdout, "    "))
    if output:
        engine = "" if found.engine == api.engine_target(None, None) else f" --engine {found.engine}"
        print(fitted(f"-- wrote {output}: jobqueue-demo verify {output}{engine}", sys.stdout))
    else:
        print(result.text, end="")
