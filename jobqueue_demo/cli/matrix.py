"""`run`, `verify` and `explore` with --matrix: one table across combinations of settings."""

from __future__ import annotations

from dataclasses import replace

MATRIX_HELP = (
    "NAME=V1,V2: run under each value of a server variable (or isolation, for every session); "
    "repeat for more axes, every combination is run. Prints a table of what differs. Global-only "
    "variables are set on the private embedded server only; for read-only ones a second embedded "
    "server is started with the value."
)


def _plan(server, texts: list[str]):
    from ..run.matrix import classify, combinations, parse_axes

    return combinations(classify(server, parse_axes(texts)))


def check_axes(texts: list[str]) -> None:
    """Refuse a malformed --matrix before any server is started."""
    from ..run.matrix import parse_axes

    parse_axes(texts)


def lesson_matrix(loaded: list, server, texts: list[str], step_timeout: float) -> bool:
    """Runs each scenario under every combination and prints the steps that differ; True
    when every combination met every expectation."""
    from .. import api as core
    from ..errors import StuckRun
    from ..run.matrix import Column, Servers, differences, session_settings, step_outcomes
    from ..render.matrix import matrix_text

    plan = _plan(server, texts)
    all_met = True
    columns: dict[int, list] = {i: [] for i in range(len(loaded))}
    with Servers(server) as servers:
        # Combinations outside, scenarios inside: a server started for a combination serves them all.
        for combination in plan:
            with servers.configured(combination) as target:
                settings = session_settings(target, combination)
                for i, scenario in enumerate(loaded):
                    events: list = []
                    try:
                        report = core.run(scenario, target, step_timeout, events.append, settings=settings)
                        summary = f"all {report.checked} met" if not report.mismatches else f"{len(report.mismatches)} not met"
                        all_met &= not report.mismatches
                    except StuckRun:
                        summary, all_met = "stuck", False
                    columns[i].append(Column(combination, step_outcomes(scenario, events), summary))
    for i, scenario in enumerate(loaded):
        found = differences(scenario, columns[i])
        rows = [(label, *cells) for label, cells in zip(found.labels, found.rows)]
        rows.append(("expectations", *(c.summary for c in columns[i])))
        print(f"-- {scenario.path}: {len(plan)} combination(s) on {server.label}")
        print(matrix_text(plan, "step", rows))
        print(f"-- {found.same} statement(s) with the same outcome everywhere are not shown")
    _say_restarts(servers)
    return all_met


def _say_restarts(servers) -> None:
    for restart in servers.restarts:
        print(f"-- a second embedded server started with {' '.join(restart.options)}: {restart.seconds:.2f} s")


def explore_matrix(loaded, server, texts: list[str], options) -> bool:
    """Explores under every combination; prints outcome counts and findings side by side.
    True when no combination violated an invariant or got stuck."""
    from ..explore.search import OUTCOMES
    from ..explore.search import explore as run_explore
    from ..run.matrix import Servers, session_settings
    from ..render.matrix import matrix_text

    plan = _plan(server, texts)
    reports = []
    with Servers(server) as servers:
        for combination in plan:
            with servers.configured(combination) as target:
                settings = session_settings(target, combination)
                reports.append(run_explore(loaded, target, replace(options, settings=settings)))
    rows = [(kind, *(f"{r.counts[kind]:,}" for r in reports)) for kind in OUTCOMES]
    findings = list(dict.fromkeys((f.kind, f.what) for r in reports for f in r.findings))
    for kind, what in findings:
        cells = []
        for report in reports:
            found = next((f for f in report.findings if (f.kind, f.what) == (kind, what)), None)
            cells.append(f"{found.schedules:,} of {report.explored:,}" if found else "-")
        rows.append((f"{kind}: {what}", *cells))
    print(f"-- {loaded.path}: {len(plan)} combination(s) on {server.label}")
    print(matrix_text(plan, "schedules", rows))
    _say_restarts(servers)
    failed = [f"[{i}]" for i, r in enumerate(reports, 1) if r.failed]
    if failed:
        print(f"verdict: FAILED under {', '.join(failed)} of {len(plan)} combination(s) (exit 1)")
    else:
        print(f"verdict: invariants hold and nothing got stuck under all {len(plan)} combination(s)")
    return not failed
