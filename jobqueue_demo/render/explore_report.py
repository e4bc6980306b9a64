"""What `explore` prints: the space, the outcomes, a transcript per distinct problem, the verdict."""

from __future__ import annotations

from typing import TextIO

from ..errors import stop_of
from ..explore.advice import honest_events
from ..run.verify import flow
from .transcript import NOTE, Line, TranscriptWriter, event_lines, prompted, result_lines

OUTCOME_WORDS = {
    "ok": "ok",
    "violated": "invariant violated",
    "deadlock": "deadlock",
    "error": "unexpected error",
    "expected": "expected error",
    "stuck": "stuck",
    "diverged": "diverged on replay",
}


# Outcomes the counts line names only when some schedule had them.
QUIET_OUTCOMES = ("expected", "diverged")


def verdict(report) -> str:
    """The one line a reader takes away, also when everything held: never kinder than the
    schedules. An error no `expect:` names comes first, as the first thing to fix."""
    invariants = report.scenario.invariants
    # In the findings' order: a check of the tool's own (explore --queue's record) among them.
    broken = list(dict.fromkeys(f.what for f in report.findings if f.kind == "violated"))
    stuck = report.counts["stuck"]
    errors = [f"unexpected {f.what} in {f.schedules:,} of {report.explored:,} schedule(s)" for f in report.findings if f.kind == "error"]
    parts = errors + [f'"{name}" violated' for name in broken] + ([f"{stuck} schedule(s) stuck"] if stuck else [])
    if report.stopped is not None:
        found = "; ".join(parts) or "no problem in them"
        return f"verdict: {stop_of(report.stopped)} after {report.explored:,} schedule(s): {found}"
    if parts:
        return f"verdict: FAILED: {'; '.join(parts)} (exit 1)"
    met = report.counts["expected"]
    expected = f"; {met:,} ended with an error that was expected, each named above" if met else ""
    if not invariants:
        return f"verdict: no invariants to check; {report.explored:,} schedule(s) ran without getting stuck{expected}"
    names = ", ".join(f'"{i.name}"' + (" (without faults)" if i.holds != "always" else "") for i in invariants)
    return f"verdict: invariants hold in all {report.explored:,} schedule(s): {names}{expected}"


def _space_line(report) -> str:
    faults = ", ".join(report.options.faults) or "none"
    head = f"up to {report.bound:,} before waits; faults: {faults}"
    if report.stopped is not None:
        what = f"{report.explored:,} schedules run, {stop_of(report.stopped)} ({head})"
    elif report.options.sample:
        what = f"{report.explored:,} distinct random schedules (seed {report.options.seed}) of {head}"
    elif report.complete:
        what = f"{report.explored:,} schedules, all run ({head})"
    else:
        what = f"{report.explored:,} schedules run, stopped by --max-schedules ({head})"
    return f"space: {what}; {report.elapsed_s:.1f} s, {report.per_second:.0f} schedules/s"


def print_report(report, out: TextIO, color: bool, width: int | None = None) -> None:
    """The report, wrapped to `width` (a terminal's; None: as it is)."""
    from .wrap import wrap_lines

    def say(text: str) -> None:
        print("\n".join(wrap_lines(text, width, "   ")), file=out)

    say(_space_line(report))
    say(f"reset: {report.reset}")
    say("outcomes: " + ", ".join(f"{OUTCOME_WORDS[k]} {n}" for k, n in report.counts.items() if n or k not in QUIET_OUTCOMES))
    if not report.findings:
        names = ", ".join(f'"{i.name}"' for i in report.scenario.invariants) or "(none written)"
        say(f"no counterexample: every schedule run ended without a problem; invariants: {names}")
        return
    if report.stopped is not None:
        # Not run again for a transcript: the run is ending.
        for finding in report.findings:
            moves = " ".join(map(str, finding.shortest.moves)) or "(no steps)"
            say(f"found: {OUTCOME_WORDS[finding.kind]}: {_what(finding)} (in {finding.schedules:,} of "
                f"{report.explored:,}); shortest schedule: {moves}")
        return
    writer = TranscriptWriter(out, tuple(report.scenario.prompts.values()), color, width)
    for group in _by_schedule(report.findings):
        print(file=out)
        writer.write(_counterexample_lines(report, group))


def _by_schedule(findings) -> list[list]:
    """Findings whose shortest schedule is the same one share a transcript (a first run
    that the run again did not reproduce has a transcript of its own)."""
    groups: dict[tuple, list] = {}
    for finding in findings:
        groups.setdefault((finding.shortest.moves, finding.reproduced), []).append(finding)
    return list(groups.values())


def _counterexample_lines(report, group) -> list:
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
    lost = [f for f in group if (f.kind, f.what) not in shortest.findings()]
    if lost:
        lines.append(Line("-- did not reproduce: run again, this schedule ended without it, and its first run is not "
                          "kept; no transcript", None, NOTE))
        return lines
    if not all(f.reproduced for f in group):
        lines.append(Line("-- as first run, lock holders not named: run again, this schedule did not show it", None, NOTE))
    for event in honest_events(report.scenario, shortest.events):
        lines += event_lines(prompted(event, report.scenario.prompts))
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
    return ", ".join(flow(row) for row in rows)


def as_dict(report) -> dict:
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
        "interrupted": None if report.stopped is None else str(stop_of(report.stopped)),
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
        "got": [list(r) for r in failed[0].got.rows] if failed and failed[0].got.error is None else None,
        "left_out": finding.left_out,
        "explanations": [{"anomaly": e.anomaly, "cause": e.cause} for e in finding.explanations],
        "transcript": [line.text for line in _counterexample_lines(report, [finding])],
    }
