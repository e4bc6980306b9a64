"""A lesson at a glance, before running it: what `jobqueue-demo show LESSON` prints."""

from __future__ import annotations

from ..scenario.model import Scenario, SessionSpec, Statement, one_line
from ..run.verify import describe_expectation


# "what it proves" in a file or a pipe, which are not otherwise wrapped.
PROSE_WIDTH = 88


def card(scenario: Scenario, name: str, variant_of: tuple[str, ...] = (), width: int | None = None) -> list[str]:
    """The card, each line wrapped to `width` (a terminal's) with continuation lines indented."""
    from .wrap import wrap

    lines = _card(scenario, name, variant_of, width or PROSE_WIDTH)
    return [piece for line in lines for piece in wrap(line, width, _hanging(line))]


def _hanging(line: str) -> str:
    return " " * (len(line) - len(line.lstrip(" ")) + 2)


def _card(scenario: Scenario, name: str, variant_of: tuple[str, ...], prose_width: int) -> list[str]:
    lines = [scenario.title, ""]
    if scenario.summary:
        lines.append(scenario.summary)
    lines.append("sessions: " + ", ".join(_session(s) for s in scenario.sessions))
    lines.append(f"steps: {len(scenario.steps)}, of which {len(scenario.statements())} statements")
    proves = _first_paragraph(scenario.why)
    if proves:
        lines += ["", "what it proves:", *_indent(proves, prose_width)]
    outcome = expected_outcome(scenario)
    if outcome:
        on = f" on {scenario.engine}" if len(scenario.engines) > 1 else ""
        lines += ["", f"expected outcome{on}:", *(f"  {line}" for line in outcome)]
    lines.append("")
    if scenario.explore:
        lines.append(f"explore variant: {scenario.explore} (jobqueue-demo explore {scenario.explore})")
    elif variant_of:
        lines.append(f"explore variant of: {', '.join(variant_of)}")
    else:
        lines.append("explore variant: none")
    if scenario.invariants:
        lines.append("invariants: " + "; ".join(i.name for i in scenario.invariants))
    lines.append(f"engines: {', '.join(scenario.engines)}")
    lines += [f"verified: {stamp}" for _, stamp in scenario.stamps] or ["verified: not recorded"]
    lines.append(f"run it: jobqueue-demo run {name}   (the YAML: jobqueue-demo show {name} --source)")
    return lines


def expected_outcome(scenario: Scenario) -> list[str]:
    """The expectations that carry the story: waits, errors, and the last statement's result."""
    statements = [(i, s) for i, s in scenario.statements() if s.expect is not None]
    telling = [(i, s) for i, s in statements if s.expect.waits is not None or s.expect.error is not None]
    if statements and statements[-1] not in telling:
        telling.append(statements[-1])
    return [_expected(i, s) for i, s in telling]


def _expected(index: int, step: Statement) -> str:
    sql = one_line(step.sql, 60)
    waits = {True: "waits for a lock, then ", False: "without waiting, ", None: ""}[step.expect.waits]
    return f"step {index + 1}, {step.session}> {sql} -> {waits}{describe_expectation(step.expect)}"


def _session(spec: SessionSpec) -> str:
    settings = [spec.isolation] if spec.isolation else []
    if spec.innodb_lock_wait_timeout is not None:
        settings.append(f"innodb_lock_wait_timeout {spec.innodb_lock_wait_timeout}")
    if spec.lock_wait_timeout is not None:
        settings.append(f"lock_wait_timeout {spec.lock_wait_timeout}")
    return spec.name + (f" ({', '.join(settings)})" if settings else "")


def _first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split()) if text.strip() else ""


def _indent(text: str, width: int) -> list[str]:
    from .wrap import wrap

    return wrap("  " + text, width, "  ")


# Below this many cells beside the names, a lesson's summary goes under its name instead.
SUMMARY_MIN = 40


def lesson_list(found, width: int | None) -> list[str]:
    """`lessons`: each lesson's name, summary and facts, explore variants last; within `width`."""
    from .wrap import wrap

    shown = [lesson for lesson in found if not lesson.problem]
    names = max((len(lesson.name) for lesson in shown), default=0)
    beside = width is None or width - names - 2 >= SUMMARY_MIN
    hang = " " * (names + 2) if beside else "  "
    out: list[str] = []
    for lesson in shown:
        if lesson.permutations is not None and not any(line.startswith("-- isolation specs") for line in out):
            out += ["", *wrap("-- isolation specs, PostgreSQL's isolationtester format (docs/specs.md), given by "
                              "file name to run, explore, compare and export:", width, "   ")]
        elif lesson.for_explore and not any(line.startswith("-- written for") for line in out):
            out += ["", *wrap("-- written for 'jobqueue-demo explore' (every order, checked by invariants):", width, "   ")]
        explore = f"; explore: {lesson.explore}" if lesson.explore else ""
        explore += f"; explore variant of {', '.join(lesson.variant_of)}" if lesson.variant_of else ""
        checked = f"{lesson.permutations:,} permutation(s)" if lesson.permutations is not None else (
            f"verified: {lesson.verified or 'not recorded'}")
        facts = f"sessions {', '.join(lesson.sessions)}; engines {', '.join(lesson.engines)}; {checked}{explore}"
        head = [f"{lesson.name:{names}s}  {lesson.summary}"] if beside else [lesson.name, hang + lesson.summary]
        for line in [*head, hang + facts]:
            out += wrap(line, width, hang)
    return out
