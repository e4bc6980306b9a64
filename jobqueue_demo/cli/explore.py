"""The `explore` command: every schedule of a scenario, checked against its invariants."""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer

from ..errors import EXIT_MISMATCH, UsageError
from .main import DSN_HELP, MAX_SECONDS, STEP_TIMEOUT_HELP, _color, _heading, app, finite, server_for
from .matrix import MATRIX_HELP

OUTCOME_WORDS = {
    "ok": "ok",
    "violated": "invariant violated",
    "deadlock": "deadlock",
    "error": "error",
    "stuck": "stuck",
    "diverged": "diverged on replay",
}


@app.command()
def explore(
    scenario: str = typer.Argument(..., help="Scenario file or lesson name."),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP, show_default=False),
    faults: str = typer.Option(
        "", "--faults", help="Also let one session give up at every point: rollback, disconnect (comma-separated).",
        show_default=False,
    ),
    max_schedules: Optional[int] = typer.Option(None, "--max-schedules", min=1, help="Stop after this many schedules."),
    sample: Optional[int] = typer.Option(None, "--sample", min=1, help="Run this many random schedules instead of all."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for --sample (default: random, and printed)."),
    jobs: int = typer.Option(2, "--jobs", min=1, max=16, help="Schedules run at once, each on its own connections."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    step_timeout: float = typer.Option(10.0, "--step-timeout", help=STEP_TIMEOUT_HELP, min=0.1, max=MAX_SECONDS, callback=finite),
    matrix: List[str] = typer.Option([], "--matrix", metavar="NAME=V1,V2", help=MATRIX_HELP, show_default=False),
) -> None:
    """Run every interleaving of a scenario's sessions and check its invariants after each.

    Each session keeps its own step order, and a session whose statement waits on a lock
    takes no further step until it completes. Prints the size of the space, the count of
    schedules by outcome (ok, invariant violated, deadlock, error, stuck) and, for each
    distinct problem, the shortest schedule showing it as a transcript. Exits 1 when an
    invariant was violated or a schedule got stuck.

    \b
    Example:
      jobqueue-demo explore skip-locked-explore
      jobqueue-demo explore claim-without-lock-explore --faults rollback,disconnect
      jobqueue-demo explore skip-locked-explore --sample 200 --seed 7 --json
      jobqueue-demo explore claim-without-lock-explore --matrix innodb_snapshot_isolation=ON,OFF
    """
    import secrets

    from .. import api as core
    from ..explore.search import ExploreOptions, planned
    from ..explore.search import explore as run_explore
    from ..explore.advice import advice
    from ..render.late_progress import LateProgress

    if seed is not None and sample is None:
        raise UsageError("--seed applies to --sample only")
    if sample is not None and max_schedules is not None:
        raise UsageError("--sample and --max-schedules exclude each other")
    options = ExploreOptions(
        faults=tuple(dict.fromkeys(f.strip() for f in faults.split(",") if f.strip())),
        max_schedules=max_schedules,
        sample=sample,
        seed=secrets.randbelow(2**31) if seed is None else seed,
        jobs=jobs,
        step_timeout=step_timeout,
    )
    loaded = core.load(scenario)
    at_most = planned(loaded, options)
    if matrix:
        _explore_matrix(loaded, dsn, matrix, options, as_json)
        return
    note = advice(loaded, core.lesson_name(loaded))
    if note and not as_json:
        print(f"-- {note}")
    with server_for(dsn) as server:
        _heading(f"-- {loaded.title}: exploring on {server.label} ({server.where})", as_json)
        # Waits take some schedules out of the space, so a run may end before the bar is full.
        with LateProgress("schedules", at_most, quiet=as_json) as advance:
            report = run_explore(loaded, server, options, lambda _: advance())
    if as_json:
        print(json.dumps({**_as_dict(report), "note": note}, indent=2, ensure_ascii=False))
    else:
        _print_report(report)
        print(verdict(report))
    if report.failed:
        raise typer.Exit(EXIT_MISMATCH)


def _explore_matrix(loaded, dsn, matrix: list[str], options, as_json: bool) -> None:
    from .matrix import check_axes, explore_matrix

    if as_json:
        raise UsageError("--matrix prints one table for all combinations; leave out --json")
    check_axes(matrix)
    with server_for(dsn) as server:
        if not explore_matrix(loaded, server, matrix, options):
            raise typer.Exit(EXIT_MISMATCH)


def verdict(report) -> str:
    """The one line a reader takes away, also when everything held."""
    invariants = report.scenario.invariants
    violated = {f.what for f in report.findings if f.kind == "violated"}
    broken = [i.name for i in invariants if i.name in violated]
    stuck = report.counts["stuck"]
    if broken or stuck:
        parts = [f'"{name}" violated' for name in broken] + ([f"{stuck} schedule(s) stuck"] if stuck else [])
        return f"verdict: FAILED: {'; '.join(parts)} (exit 1)"
    if not invariants:
        return f"verdict: no invariants to check; {report.explored:,} schedule(s) ran without getting stuck"
    names = ", ".join(f'"{i.name}"' + (" (without faults)" if i.holds != "always" else "") for i in invariants)
    return f"verdict: invariants hold in all {report.explored:,} schedule(s): {names}"


def _space_line(report) -> str:
    faults = ", ".join(report.options.faults) or "none"
    head = f"up to {report.bound:,} before waits; faults: {faults}"
    if report.options.sample:
        what = f"{report.explored:,} distinct random schedules (seed {report.options.seed}) of {head}"
    elif report.complete:
        what = f"{report.explored:,} schedules, all run ({head})"
    else:
        what = f"{report.explored:,} schedules run, stopped by --max-schedules ({head})"
    return f"space: {what}; {report.elapsed_s:.1f} s, {report.per_second:.0f} schedules/s"


def _print_report(report) -> None:
    from ..render.transcript import TranscriptWriter

    print(_space_line(report))
    print(f"reset: {report.reset}")
    print("outcomes: " + ", ".join(f"{OUTCOME_WORDS[k]} {n}" for k, n in report.counts.items() if n or k != "diverged"))
    if not report.findings:
        names = ", ".join(f'"{i.name}"' for i in report.scenario.invariants) or "(none written)"
        print(f"no counterexample: every schedule run ended without a problem; invariants: {names}")
        return
    writer = TranscriptWriter(sys.stdout, report.scenario.session_names, _color())
    for group in _by_schedule(report.findings):
        print()
        writer.write(_counterexample_lines(report, group))


def _by_schedule(findings) -> list[list]:
    """Findings whose shortest schedule is the same one share a transcript."""
    groups: dict[tuple, list] = {}
    for finding in findings:
        groups.setdefault(finding.shortest.moves, []).append(finding)
    return list(groups.values())


def _counterexample_lines(report, group) -> list:
    from ..explore.advice import honest_events
    from ..render.transcript import NOTE, Line, event_lines, result_lines

    shortest = group[0].shortest
    heads = "; ".join(f'{OUTCOME_WORDS[f.kind]}: {_what(f)} (in {f.schedules:,} of {report.explored:,})' for f in group)
    moves = " ".join(map(str, shortest.moves)) or "(no steps)"
    lines = [
        Line(f"== {heads}", None, NOTE),
        Line(f"== shortest schedule, {len(shortest.moves)} steps: {moves}", None, NOTE),
    ]
    if group[0].left_out:
        lines.append(Line(f"== the {group[0].left_out} step(s) after it in the schedule found change nothing; "
                          "left out, uncommitted work rolled back before the check", None, NOTE))
    lines += [Line(f"== {e.anomaly}: {e.cause}", None, NOTE) for e in group[0].explanations]
    if not all(f.reproduced for f in group):
        lines.append(Line("-- note: run again for this transcript, the schedule did not show it this time", None, NOTE))
    for event in honest_events(report.scenario, shortest.events):
        lines += event_lines(event)
    if shortest.stuck:
        lines.append(Line(f"-- {shortest.stuck}", None, NOTE))
    if shortest.diverged:
        lines.append(Line(f"-- replay diverged: {shortest.diverged}", None, NOTE))
    for check in shortest.checks:
        if not check.held:
            lines.append(Line(f'-- at the end, invariant "{check.invariant.name}": {check.invariant.sql}', None, NOTE))
            lines += result_lines("", check.invariant.sql, check.got)
            lines.append(Line(f"-- expected: {_rows_text(check.invariant.expect)}", None, NOTE))
    return lines


def _what(finding) -> str:
    return f'"{finding.what}"' if finding.kind == "violated" else finding.what


def _rows_text(rows) -> str:
    if not rows:
        return "no rows"
    return ", ".join("[" + ", ".join("NULL" if v is None else v for v in row) + "]" for row in rows)


def _as_dict(report) -> dict:
    return {
        "scenario": report.scenario.path,
        "title": report.scenario.title,
        "server": report.server,
        "faults": list(report.options.faults),
        "mode": "sample" if report.options.sample else "all",
        "seed": report.options.seed if report.options.sample else None,
        "bound": report.bound,
        "explored": report.explored,
        "complete": report.complete,
        "outcomes": report.counts,
        "elapsed_s": round(report.elapsed_s, 3),
        "schedules_per_second": round(report.per_second, 1),
        "reset": report.reset,
        "findings": [_finding_dict(report, f) for f in report.findings],
        "verdict": verdict(report),
    }


def _finding_dict(report, finding) -> dict:
    failed = [c for c in finding.shortest.checks if not c.held and c.invariant.name == finding.what]
    return {
        "kind": finding.kind,
        "what": finding.what,
        "schedules": finding.schedules,
        "reproduced": finding.reproduced,
        "shortest": [str(m) for m in finding.shortest.moves],
        "left_out": finding.left_out,
        "explanations": [{"anomaly": e.anomaly, "cause": e.cause} for e in finding.explanations],
        "got": [list(r) for r in failed[0].got.rows] if failed and failed[0].got.error is None else None,
        "transcript": [line.text for line in _counterexample_lines(report, [finding])],
    }
