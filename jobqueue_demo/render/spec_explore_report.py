"""What `explore FILE.spec` prints: the space, the outcomes, each finding's first permutation in
isolationtester's form, the verdict; with --show-all, every permutation as it runs, so that a
spec explored without faults prints what isolationtester prints for it."""

from __future__ import annotations

import io
from typing import TextIO

from ..explore.spec_permutations import OUTCOMES, STUCK, Permutation, SpecReport
from .isolationtester import IsolationtesterView


class PermutationPrinter:
    """--show-all: isolationtester's heading once, then each permutation's lines as it ends."""

    def __init__(self, scenario, out: TextIO, err: TextIO, terminal: bool):
        self.view = IsolationtesterView(out, err, scenario, terminal)
        self.started = False

    def __call__(self, done: Permutation) -> None:
        from ..run import events as ev

        if not self.started:
            self.started = True
            self.view.write(ev.RunStarted("", "", ""))
        for event in done.events:
            self.view.write(event)


def permutation_text(scenario, done: Permutation) -> str:
    """One permutation's lines as --show-all prints them (a failed teardown's too)."""
    out = io.StringIO()
    view = IsolationtesterView(out, out, scenario)
    for event in done.events:
        view.write(event)
    return out.getvalue()


def space_line(report: SpecReport) -> str:
    faults = ", ".join(report.faults) or "none"
    if report.explored == report.planned:
        ran = "all run"
    elif report.seed is not None:
        ran = f"{report.explored:,} run, drawn at random (seed {report.seed})"
    else:
        ran = f"the first {report.explored:,} run"
    runners = f" on {report.runners} scratch databases at once" if report.runners > 1 else ""
    return (f"space: {report.planned:,} permutations, {ran} (the spec's, isolationtester's order; faults: {faults}); "
            f"{report.elapsed_s:.1f} s{runners}")


def verdict(report: SpecReport) -> str:
    violated = [what for kind, what in report.findings if kind != STUCK]
    stuck = report.outcomes[STUCK]
    parts = [f'"{name}" violated' for name in violated] + ([f"{stuck} permutation(s) stuck"] if stuck else [])
    if parts:
        return f"verdict: FAILED: {'; '.join(parts)} (exit 1)"
    if not report.invariants:
        return f"verdict: no invariants to check (#@invariant NAME {{ SQL }}); {report.explored:,} permutation(s) completed"
    names = ", ".join(f'"{name}"' for name in report.invariants)
    return f"verdict: invariants hold in all {report.explored:,} permutation(s): {names}"


def print_spec_report(scenario, report: SpecReport, out: TextIO, width: int | None = None) -> None:
    from .wrap import wrap_lines

    def say(text: str) -> None:
        print("\n".join(wrap_lines(text, width, "   ")), file=out)

    say(space_line(report))
    say("outcomes: " + ", ".join(f"{kind} {report.outcomes[kind]}" for kind in OUTCOMES)
        + (f"; a deadlock (40P01) broken in {report.deadlocks:,}, as the spec's own output" if report.deadlocks else ""))
    if not report.findings:
        say("no counterexample: every permutation completed" + ("; every invariant held" if report.invariants else ""))
    for (kind, what), done in report.findings.items():
        print(file=out)
        say(f"== {kind}: {what}; first in permutation: {' '.join(done.trial.names)}")
        out.write(permutation_text(scenario, done))
    print(file=out)
    say(verdict(report))


def spec_as_dict(scenario, report: SpecReport) -> dict:
    return {
        "scenario": scenario.path,
        "title": report.title,
        "faults": list(report.faults),
        "invariants": list(report.invariants),
        "planned": report.planned,
        "explored": report.explored,
        "outcomes": {kind: report.outcomes[kind] for kind in OUTCOMES},
        "deadlocks": report.deadlocks,
        "elapsed_s": round(report.elapsed_s, 3),
        "runners": report.runners,
        "seed": report.seed,
        "findings": [
            {"kind": kind, "what": what, "permutation": list(done.trial.names), "output": permutation_text(scenario, done)}
            for (kind, what), done in report.findings.items()
        ],
        "verdict": verdict(report),
    }
