"""What the commands do, as library calls: no terminal, no exit codes, no CLI imports."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .engine.seam import DEFAULT_ENGINE, entry_of, seam_of_dsn
from .engine.seam import ENGINE_NAMES as ENGINE_NAMES  # the CLI's list of engines
from .engine.types import shown as shown  # the CLI's lines, a server's control characters written out
from .errors import IsolationtesterEnd, RecordError, ScenarioError, StuckError, StuckRun

if TYPE_CHECKING:
    from .run.compare import Comparison
    from .scenario.model import Scenario


@dataclass(eq=False)
class RunReport:
    """What one run did: its events in order, the expectations it did not meet, how many it checked."""

    events: list
    mismatches: list
    checked: int
    ran_on: datetime.date  # the day the run started: the date a page says it was verified


def load(name: str) -> Scenario:
    from .scenario.lessons import resolve
    from .scenario.loader import load_scenario

    return load_scenario(resolve(name))


@contextmanager
def server(
    dsn: str | None,
    allow_shared_user: bool = False,
    engine: str | None = None,
    cluster: int | None = None,
    nodes: tuple[str, ...] = (),
):
    """The server to run on, after sweeping what runs killed earlier left there and here.

    `engine` ("mysql" or "postgresql"; None: $JOBQUEUE_DEMO_DSN's, else mysql) picks the
    embedded server when no DSN is given; a DSN names its own engine by its scheme. With
    `cluster`, node 1 of a Galera cluster of that many nodes: the one `nodes` names
    (nodeN=mysql://…), else an embedded one.
    """
    from dataclasses import replace

    from .engine.leftovers import sweep_dirs
    from .engine.seam import open_server
    from .engine.types import DROPS_AT_CLOSE, DROPS_WITH_SERVER

    sweep_dirs()
    if cluster:
        if engine not in (None, DEFAULT_ENGINE):
            from .errors import UsageError

            raise UsageError("a Galera cluster is MariaDB's: --cluster (or a cluster lesson) runs without --engine postgresql")
        with _cluster(dsn, cluster, nodes) as info:
            yield replace(info, shared_user=allow_shared_user)
        return
    with open_server(dsn, engine) as info:
        if not info.embedded:
            info.seam.sweep(info.params)
        yield replace(info, shared_user=allow_shared_user, drops=DROPS_WITH_SERVER if info.embedded else DROPS_AT_CLOSE)


@contextmanager
def _cluster(dsn: str | None, size: int, nodes: tuple[str, ...]):

    from .engine.galera.cluster import open_cluster
    from .errors import UsageError

    if dsn:
        raise UsageError(
            f"this needs a {size}-node Galera cluster, and --dsn names one server: leave --dsn out "
            "to start an embedded cluster, or name each node (--dsn node1=mysql://… --dsn node2=…)"
        )
    if nodes and len(nodes) < size:
        raise UsageError(f"this needs a {size}-node Galera cluster, and --dsn names {len(nodes)} node(s)")
    with open_cluster(size, list(nodes)) as cluster:
        first = cluster.node(1)
        if not first.embedded:
            # Runs hold their named lock on node 1, where they make their scratch database.
            first.seam.sweep(first.params)
        yield cluster.as_server()


def split_dsns(dsn: str | list[str] | None) -> tuple[str | None, tuple[str, ...]]:
    """(one server's DSN, a cluster's nodeN=… DSNs) from the --dsn options; one is empty."""
    given = [dsn] if isinstance(dsn, str) else list(dsn or ())
    if not given:
        return None, ()
    if len(given) == 1 and not given[0].lstrip().startswith("node"):
        return given[0], ()  # the cluster module (and socket) stay unimported on a plain run
    from .engine.galera.cluster import NODE_DSN
    from .errors import UsageError

    nodes = tuple(d for d in given if NODE_DSN.match(d.strip()))
    if nodes and len(nodes) != len(given):
        raise UsageError("--dsn names one server, or every node of a cluster as nodeN=mysql://…, not both")
    if not nodes and len(given) > 1:
        raise UsageError("--dsn given more than once: name one server, or each node of a cluster as nodeN=mysql://…")
    return (None, nodes) if nodes else (given[0] if given else None, ())


def note_interrupt(stop: BaseException) -> bool:
    """From now on every wait of this process is short: it is about to exit (engine/deadlines.py).
    Whether `stop` is to be raised later, when the clean-up the run is in has ended (False: now)."""
    from .engine.deadlines import defer, note_interrupt as bound_waits

    bound_waits()
    return defer(stop)


def cleanup(dsn: str | None, dry_run: bool, cache: bool):
    """List, and unless `dry_run` remove, what killed runs left on the server and this machine:
    one Sweep (engine/leftovers.py) of them all."""
    from .engine.dsn import DSN_ENV
    from .engine.leftovers import Sweep, sweep_cache, sweep_dirs
    from .engine.seam import told_as_env
    from .engine.throwaway import cache_root

    sweeps = [sweep_dirs(dry_run)]
    given = dsn
    dsn = dsn or os.environ.get(DSN_ENV) or None
    if dsn is not None:
        with told_as_env(not given):
            seam = seam_of_dsn(dsn)
            params = seam.parse_dsn(dsn)
        sweeps.append(seam.sweep(params, dry_run))
    if cache:
        sweeps.append(sweep_cache(cache_root(), dry_run))
    return Sweep([f for s in sweeps for f in s.found], [p for s in sweeps for p in s.problems])


def check_engine_name(name: str) -> None:
    """A UsageError unless `name` is in the registry of engines (engine/seam.py)."""
    entry_of(name)


def for_server(scenario: Scenario, server) -> Scenario:
    """The lesson as written for this server's engine; UsageError when it is not written for it."""
    return scenario.for_engine(server.engine)


def engine_target(dsn: str | None, engine: str | None) -> str:
    """The engine the server will be of, known before it starts: the DSN's, else `engine`,
    else $JOBQUEUE_DEMO_DSN's, else mysql (as engine/mysql/server.py open_server chooses)."""
    from .engine.dsn import DSN_ENV
    from .engine.seam import told_as_env

    given = dsn
    dsn = dsn or (None if engine else os.environ.get(DSN_ENV) or None)
    if not dsn:
        return engine or DEFAULT_ENGINE
    with told_as_env(not given):
        return seam_of_dsn(dsn).name


def check_engine(scenarios, dsn: str | None, engine: str | None) -> None:
    """UsageError, before any server starts, for a scenario not written for the engine the
    server will be of."""
    target = engine_target(dsn, engine)
    for scenario in scenarios:
        scenario.for_engine(target)


def run(
    scenario: Scenario, server, step_timeout: float, on_event: Callable | None = None, show_locks: bool = False,
    settings: tuple[str, ...] = (), scratch=None, application: str | None = None,
) -> RunReport:
    from .run.driver import Run, RunOptions
    from .run.verify import check

    scenario = for_server(scenario, server)
    events = []
    ran_on = datetime.date.today()
    # Closed here, not when garbage collected: an exception from on_event (a viewer quitting,
    # Ctrl-C) must roll back and drop the scratch database while the server is still up.
    try:
        options = RunOptions(step_timeout=step_timeout, show_locks=show_locks, session_settings=settings, scratch=scratch,
                             application=application)
        runner = Run
        if scenario.spec is not None:  # an isolation spec: every permutation, as isolationtester runs them
            from .run.spec_run import SpecRun as runner
        with closing(runner(scenario, server, options).events()) as stream:
            for event in stream:
                events.append(event)
                if on_event is not None:
                    on_event(event)
    except IsolationtesterEnd:
        raise  # a spec's run ended as isolationtester's ends: told in its words
    except StuckError as e:
        raise _stuck_after(scenario, events, e) from None
    checked = sum(1 for _, s in scenario.statements() if s.expect is not None)
    if scenario.spec is not None:  # a spec expects nothing of a step: its errors are its output
        return RunReport(events, [], checked, ran_on)
    return RunReport(events, check(scenario, events), checked, ran_on)


@contextmanager
def shared_scratch(server, step_timeout: float):
    """One scratch database and per-run user for several isolation specs run in turn (`run`'s
    `scratch`), as pg_isolation_regress runs PostgreSQL's own in one database: made once, emptied
    after each spec, dropped at the end. A database per spec cost 30-190 ms of CREATE DATABASE each."""
    from .run.connections import new_scratch

    scratch = new_scratch(server, step_timeout)
    scratch.open()
    try:
        yield scratch
    except BaseException:
        scratch.close(quiet=True)
        raise
    scratch.close()


@dataclass(eq=False)
class SpecOutput:
    """An isolation spec's output (`run --format isolationtester`'s) against its expected files."""

    expected: list[str]  # the files it was compared with
    matched: str | None  # the one it equals, None when it equals none
    # Against the first expected file, when it equals none; its control characters written out
    # (the server's text, which scenario SQL chooses, goes to a terminal: RAISE ... chr(27) ...).
    diff: str


def output_checked(scenario: Scenario, server) -> bool:
    """Whether verify compares the scenario's output with expected files: an isolation spec
    that has some (scenario/spec.py expected_outputs), run on PostgreSQL, whose output it is."""
    from .scenario.spec import expected_outputs

    return scenario.spec is not None and for_server(scenario, server).spec.isolationtester and bool(expected_outputs(scenario.path))


def check_spec_output(scenario: Scenario, server, step_timeout: float, scratch=None) -> SpecOutput:
    """The spec run as `run FILE.spec --format isolationtester` runs it, its standard output and
    error in one text (as pg_isolation_regress keeps isolationtester's), compared with each of
    its expected files in turn."""
    import difflib
    import io

    from .engine.types import shown
    from .render.isolationtester import IsolationtesterView
    from .scenario.spec import expected_outputs

    expected = expected_outputs(scenario.path)
    text = io.StringIO()
    view = IsolationtesterView(text, text, for_server(scenario, server))
    # Its sessions named as pg_isolation_regress names them (PGAPPNAME=isolation/NAME), for
    # the specs that look themselves up; $PGAPPNAME when set.
    application = os.environ.get("PGAPPNAME") or f"isolation/{os.path.splitext(os.path.basename(scenario.path))[0]}"
    try:
        run(scenario, server, step_timeout, view.write, scratch=scratch, application=application)
    except IsolationtesterEnd as end:  # as isolationtester ends: its words are part of its output
        text.write(end.words)
    got = text.getvalue()
    wanted = {path: _read_expected(path) for path in expected}
    matched = next((path for path in expected if wanted[path] == got), None)
    diff = "" if matched else "".join(difflib.unified_diff(
        wanted[expected[0]].splitlines(keepends=True), got.splitlines(keepends=True),
        fromfile=os.path.normpath(expected[0]), tofile="jobqueue-demo"))
    return SpecOutput(expected, matched, shown(diff))


def _read_expected(path: str) -> str:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(path, f"cannot read the expected output: {e}") from None


def serve_options(host: str, port: int | None, predict: bool, pace: float | None):
    from .serve.lesson import ServeOptions

    return ServeOptions(host, port, predict, pace)


def serve(scenario: Scenario, server, step_timeout: float, options, keys, announce: Callable, on_event: Callable,
          show_locks: bool = False) -> RunReport:
    """Run the lesson as a web page (serve/): each step when the teacher asks for it, every
    page following; `announce` is told the pages' addresses once they answer, `on_event`
    sees each event after the pages do. At the end the pages show the verdict and the page of
    the whole run, and stay until the teacher's terminal lets them go (serve/teacher.py)."""
    from .render.export import LessonFacts, render_html
    from .serve.lesson import Lesson

    scenario = for_server(scenario, server)
    with Lesson(scenario, server.label, options, keys) as lesson:
        announce(lesson.addresses)

        def both(event) -> None:
            lesson.on_event(event)
            on_event(event)

        report = run(scenario, server, step_timeout, both, show_locks)
        facts = LessonFacts(scenario, tuple(report.events), verified_line(server, report.ran_on), lesson_name(scenario))
        lesson.finish(report, render_html(facts))
        lesson.linger()
    return report


def _stuck_after(scenario: Scenario, events: list, stuck: StuckError) -> StuckRun:
    """The stuck message with the differences before it, and the failed statements named:
    a typo that left a lock unreleased is where the mistake was made, not the wait."""
    from .run import events as ev
    from .run.verify import check, failed_unexpectedly

    started = [e.index for e in events if isinstance(e, ev.StepStarting)]
    message = str(stuck)
    failed = failed_unexpectedly(scenario, events)
    if failed:
        message += "; before that, " + "; ".join(failed)
    return StuckRun(message, check(scenario, events, started[-1] if started else 0))


def verified_line(server, on: datetime.date | None = None) -> str:
    """The stamp `record` writes: a cluster lesson's says it was verified on a cluster."""
    where = f" ({len(server.nodes)}-node Galera cluster)" if server.nodes else ""
    return f"{server.label}{where} on {(on or datetime.date.today()).isoformat()}"


def record(scenario: Scenario, server, step_timeout: float) -> int:
    """Rewrite the scenario file with observed results; returns how many statements.

    The new text must load and its expectations must hold for the run just made, or the
    file is left as it was.
    """
    from .run.record import rewrite
    from .run.verify import check, outcomes
    from .safe_write import check_writable, write_file
    from .scenario.loader import scenario_from_text

    check_writable(scenario.path)
    scenario = for_server(scenario, server)
    report = run(scenario, server, step_timeout)
    seen = outcomes(report.events)
    text = rewrite(scenario, seen, verified_line(server, report.ran_on))
    try:
        mismatches = check(scenario_from_text(scenario.path, text).for_engine(scenario.engine), report.events)
    except ScenarioError as e:
        raise RecordError(f"{e}: the recorded text would not load; {scenario.path} left unchanged") from None
    if mismatches:
        raise RecordError(
            f"{scenario.path}: the recorded expectations would not hold ({mismatches[0]}); file left unchanged"
        )
    write_file(scenario.path, text)
    return len(seen)


def lesson_name(scenario: Scenario) -> str:
    """How a reader names this lesson to `run`: the shipped lesson's name, else its path."""
    from pathlib import Path

    from .scenario.lessons import lesson_dirs

    path = Path(scenario.path).resolve()
    if any(path.parent == folder.resolve() for folder in lesson_dirs()):
        return path.stem
    return scenario.path


def lesson_page(scenario: Scenario, server, step_timeout: float, fmt: str, show_locks: bool = False) -> str:
    """Run and verify the scenario, then render its lesson page; a page is only ever made
    from a run that met every expectation."""
    from .errors import ExpectationsNotMet
    from .render.export import LessonFacts
    from .render.pages import render_page

    scenario = for_server(scenario, server)
    report = run(scenario, server, step_timeout, show_locks=show_locks)
    if report.mismatches:
        raise ExpectationsNotMet(
            f"{scenario.path}: {len(report.mismatches)} expectation(s) not met on {server.label}; no page written",
            report.mismatches,
        )
    recorded = tuple(stamp for engine, stamp in scenario.stamps if engine != scenario.engine)
    facts = LessonFacts(
        scenario, tuple(report.events), verified_line(server, report.ran_on), lesson_name(scenario), recorded=recorded,
    )
    return render_page(facts, fmt)


def lesson_page_engines(
    scenario: Scenario, engines: list[str], step_timeout: float, fmt: str, allow_shared_user: bool = False,
) -> str:
    """The lesson page with one transcript per engine, each run on that engine's embedded
    server and verified; nothing is rendered unless every run met its expectations."""
    from dataclasses import replace

    from .errors import ExpectationsNotMet, UsageError
    from .render.export import LessonFacts
    from .render.pages import render_page

    missing = [e for e in engines if e not in scenario.engines]
    if missing:
        raise UsageError(f"{scenario.name}: written for {', '.join(scenario.engines)} only, not {', '.join(missing)}")
    runs = [engine_run(scenario, None, engine, step_timeout, allow_shared_user) for engine in engines]
    for done in runs:
        if done.mismatches:
            raise ExpectationsNotMet(
                f"{scenario.path}: {len(done.mismatches)} expectation(s) not met on {done.server}; no page written",
                list(done.mismatches),
            )
    name = lesson_name(scenario)
    pages = [LessonFacts(done.scenario, done.events, done.verified, name) for done in runs]
    return render_page(replace(pages[0], others=tuple(pages[1:])), fmt)


# -- several engines ----------------------------------------------------------------------


def engine_targets(scenario: Scenario, dsns: list[str]) -> list[tuple[str | None, str]]:
    """(dsn, engine) for each run of a comparison: the DSNs given (each names its engine),
    else for each engine the lesson is written for $JOBQUEUE_DEMO_DSN where it names that
    engine, and the engine's embedded server otherwise."""
    from .errors import UsageError

    if dsns:
        if len(dsns) != 2:
            raise UsageError("give --dsn twice, one server per side, or not at all (the embedded servers)")
        return [(dsn, seam_of_dsn(dsn).name) for dsn in dsns]
    if len(scenario.engines) < 2:
        raise UsageError(
            f"{scenario.name}: written for {scenario.engines[0]} only; engines: [{scenario.engines[0]}]: nothing to compare"
        )
    # With no DSN, each engine's server is $JOBQUEUE_DEMO_DSN where it is of that engine,
    # else that engine's embedded one (engine/mysql/server.py open_server).
    return [(None, engine) for engine in scenario.engines[:2]]


def engine_run(scenario: Scenario, dsn: str | None, engine: str, step_timeout: float, allow_shared_user: bool = False):
    """The lesson run on one server: a run/compare.EngineRun (its mismatches kept, not raised)."""
    from .run.compare import EngineRun

    with server(dsn, allow_shared_user, engine) as info:
        report = run(scenario, info, step_timeout)
        verified = verified_line(info, report.ran_on)
        return EngineRun(for_server(scenario, info), tuple(report.events), verified, tuple(report.mismatches))


def compare(scenario: Scenario, dsns: list[str], step_timeout: float, allow_shared_user: bool = False) -> Comparison:
    """The lesson run on two engines (or two servers), and the statements whose outcome differs."""
    from .run.compare import Comparison, differences

    left, right = (
        engine_run(scenario, dsn, engine, step_timeout, allow_shared_user)
        for dsn, engine in engine_targets(scenario, dsns)
    )
    return Comparison(left, right, differences(left, right))


# -- explore ------------------------------------------------------------------------------


def explore_options(
    faults: str, max_schedules: int | None, sample: int | None, seed: int | None, jobs: int, step_timeout: float
):
    """ExploreOptions from the command's values; UsageError for combinations that exclude each other."""
    import secrets

    from .errors import UsageError
    from .explore.search import ExploreOptions

    if seed is not None and sample is None:
        raise UsageError("--seed applies to --sample only")
    if sample is not None and max_schedules is not None:
        raise UsageError("--sample and --max-schedules exclude each other")
    return ExploreOptions(
        faults=tuple(dict.fromkeys(f.strip() for f in faults.split(",") if f.strip())),
        max_schedules=max_schedules,
        sample=sample,
        seed=secrets.randbelow(2**31) if seed is None else seed,
        jobs=jobs,
        step_timeout=step_timeout,
    )


def explore_faults() -> tuple[str, ...]:
    """What `explore --faults` takes, in the order it tries them (scenario/fault_kinds.py)."""
    from .scenario.fault_kinds import EXPLORE_FAULTS

    return EXPLORE_FAULTS


def explore_planned(scenario: Scenario, options) -> int:
    """How many schedules the exploration runs at most; UsageError when it is not runnable."""
    if scenario.spec is not None:
        from .explore.spec_permutations import chosen, trials

        return len(chosen(trials(scenario, options.faults), options.max_schedules, options.sample, options.seed))
    from .explore.search import planned

    return planned(scenario, options)


def explore_advice(scenario: Scenario) -> str | None:
    """What the report may honestly say before it starts (explore/advice.py)."""
    from .explore.advice import advice

    return advice(scenario, lesson_name(scenario))


def explore_spec(scenario: Scenario, server, options, on_permutation: Callable | None = None):
    """An isolation spec's permutations (with faults in place of each step) run as
    isolationtester runs them, its invariants checked after each; the SpecReport."""
    from .explore.spec_permutations import explore_spec as run_spec

    return run_spec(for_server(scenario, server), server, options, on_permutation)


def explore(scenario: Scenario, server, options, on_schedule: Callable | None = None):
    """Every interleaving (or a sample) run and checked; the Report."""
    from .explore.search import explore as run_explore

    return run_explore(for_server(scenario, server), server, options, on_schedule)


# -- --matrix ------------------------------------------------------------------------------


def check_matrix(texts: list[str]) -> None:
    """UsageError for a malformed --matrix, before any server is started."""
    from .run.matrix import parse_axes

    parse_axes(texts)


def lesson_matrix(scenarios: list[Scenario], server, texts: list[str], step_timeout: float):
    """Each scenario run under every combination of the --matrix settings: the MatrixRuns
    (run/matrix.py) and, per scenario, a LessonTable of the steps whose outcome differs."""
    from .run.matrix import LessonTable, differences, under_each

    def run_each(target, settings: tuple[str, ...]) -> list:
        return [_matrix_column(scenario, target, step_timeout, settings) for scenario in scenarios]

    runs = under_each(server, texts, run_each)
    tables = []
    for i, scenario in enumerate(scenarios):
        columns = [per_combination[i] for per_combination in runs.results]
        summaries = tuple(c.summary for c in columns)
        tables.append(LessonTable(scenario, differences(scenario, columns), summaries, all(c.met for c in columns)))
    return runs, tables


def _matrix_column(scenario: Scenario, server, step_timeout: float, settings: tuple[str, ...]):
    from .run.matrix import Column, step_outcomes

    events: list = []
    try:
        report = run(scenario, server, step_timeout, events.append, settings=settings)
    except StuckRun:
        return Column(step_outcomes(scenario, events), "stuck", False)
    if report.mismatches:
        return Column(step_outcomes(scenario, events), f"{len(report.mismatches)} not met", False)
    return Column(step_outcomes(scenario, events), f"all {report.checked} met", True)


def explore_matrix(scenario: Scenario, server, texts: list[str], options):
    """The scenario explored under every combination of the --matrix settings: MatrixRuns
    whose results are the explore Reports, in combination order."""
    from dataclasses import replace

    from .run.matrix import under_each

    return under_each(server, texts, lambda target, settings: explore(scenario, target, replace(options, settings=settings)))


# -- lessons ------------------------------------------------------------------------------


def lessons() -> list:
    """The shipped lessons, each with its summary, sessions and explore variants."""
    from .scenario.catalogue import catalogue

    return catalogue()


def variant_of(name: str) -> tuple[str, ...]:
    """The lessons a lesson is the explore variant of."""
    return next((entry.variant_of for entry in lessons() if entry.name == name), ())


# -- workers and bench --------------------------------------------------------------------


def strategies() -> tuple:
    """The claim strategies, in the order the help lists them (workers/strategies.py)."""
    from .workers.strategies import REGISTRY

    return REGISTRY


def load_queue(path: str):
    """A queue file (docs/queue-format.md), checked whole: ScenarioError with file:line otherwise."""
    from .scenario.queue_file import load_queue_file

    return load_queue_file(path)


def queue_scenario(path: str, enqueue_during: bool = False, fail_once: bool = False) -> Scenario:
    """The Scenario explore runs for a queue file: claimers A and B on its SQL (scenario/queue_scenario.py)."""
    from .scenario.queue_file import load_queue_file
    from .scenario.queue_scenario import queue_scenario as made

    return made(load_queue_file(path), enqueue_during, fail_once)


def workers_config(**values):
    """A checked WorkersConfig; UsageError (one line) for values that cannot make a meaningful run."""
    from .workers.crew import WorkersConfig, validate

    config = WorkersConfig(**values)
    validate(config)
    return config


def run_workers(config, server, on_progress: Callable | None = None):
    """The workers run to the end and checked: a WorkersSummary. Raises WorkersStuck (a
    StuckError with the server's waits-for picture) when no job completes for the stall window."""
    from .workers.crew import run_workers as run_crew

    if config.queue is not None:
        from .workers.own_queue import run_queue_file

        return run_queue_file(config, server, on_progress)
    return run_crew(config, server, on_progress)


def compare_cluster(config, server, on_progress: Callable | None = None):
    """The workers spread over the cluster's nodes, on node 1 only, and on a single embedded
    server, one after the other: a ClusterComparison."""
    from .workers.cluster import compare
    from .workers.crew import run_workers as run_crew

    return compare(config, server, run_crew, on_progress)


def sweep_config(
    strategies: str, workers: str | None, isolations: str, jobs: int | None, full: bool, batch: int, work_ms: float,
    repeat: int, kill: int, queues: str = "",
):
    """A checked SweepConfig from the command's comma-separated values and defaults."""
    from .workers.crew import ISOLATIONS
    from .workers.sweep import (
        FULL_JOBS,
        QUICK_JOBS,
        QUICK_WORKERS,
        SWEEPABLE,
        WORKER_COUNTS,
        SweepConfig,
        parse_counts,
        parse_names,
        validate_sweep,
    )

    default_workers = ",".join(str(n) for n in (WORKER_COUNTS if full else QUICK_WORKERS))
    config = SweepConfig(
        strategies=parse_names(strategies, SWEEPABLE, "strategy"),
        workers=parse_counts(default_workers if workers is None else workers),
        isolations=parse_names(isolations, ISOLATIONS, "isolation"),
        jobs=jobs or (FULL_JOBS if full else QUICK_JOBS),
        batch=batch,
        work_ms=work_ms,
        repeat=repeat,
        kill=kill,
        queues=tuple(load_queue(path.strip()) for path in queues.split(",") if path.strip()),
    )
    validate_sweep(config)
    return config


def sweep(config, server, on_row: Callable | None = None, on_step: Callable | None = None):
    """Strategies x workers x isolation, each step next to the same-run ceiling: a SweepResult."""
    from .workers.sweep import sweep as run_sweep

    return run_sweep(config, server, on_row, on_step)


def write_plot(result, path: str) -> bool:
    """The sweep's plot written to `path`; False when matplotlib is not installed."""
    from .workers.sweep import write_plot as plot

    return plot(result, path)


# -- replay ---------------------------------------------------------------------------------


def read_deadlock_report(name: str):
    """(its path, the deadlock report): a file, or a report shipped with the package
    (replay/examples.py), read by replay/readers.py, its size bounded."""
    from .replay.examples import resolve
    from .replay.readers import read_report

    path = resolve(name)
    return path, read_report(path, _bounded_read(path))


def replay_plan(report, report_path: str, schema_path: str | None, rows_path: str | None, dsn: str | None):
    """The lesson's pieces (replay/build.py): the schema from `schema_path`, or read from the
    server `dsn` names (its CREATE statements, no row read), the rows from `rows_path` or
    made from the report."""
    from pathlib import Path

    from .errors import UsageError
    from .replay.build import plan
    from .replay.examples import beside
    from .replay.schema import read_schema

    if schema_path is None and dsn is None:
        schema_path = beside(report_path, "schema")
        rows_path = rows_path or beside(report_path, "rows")
    if (schema_path is None) == (dsn is None):
        raise UsageError("replay needs the schema: --schema SCHEMA.sql, or --dsn of the database to read it from (one of them)")
    if schema_path is not None:
        schema = _bounded_read(schema_path).decode("utf-8", "replace")
    else:
        schema = _schema_from(dsn, report)
        schema_path = f"the schema read from {dsn}"
    rows = _bounded_read(rows_path).decode("utf-8", "replace") if rows_path else None
    tables = read_schema(schema_path, schema, report.innodb)
    return plan(report, Path(report_path).name, schema_path, schema, tables, rows)


def _schema_from(dsn: str, report) -> str:
    from .engine.seam import open_server

    with open_server(dsn, None) as info:
        if info.engine != report.engine:
            from .errors import UsageError

            raise UsageError(f"--dsn names a {info.engine} server, and the report is {report.engine}'s")
        return info.seam.create_statements(info.params, tuple(report.tables()))


def _bounded_read(path: str) -> bytes:
    from .errors import ReportError
    from .replay.report import MAX_REPORT_BYTES

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_REPORT_BYTES + 1)
    except OSError as e:
        raise ReportError(path, e.strerror or str(e)) from None
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(path, "more than 1 MiB: a deadlock report, its schema or its rows is at most 1 MiB each")
    return data


@contextmanager
def private_server(engine: str):
    """An embedded throwaway server of `engine`, whatever $JOBQUEUE_DEMO_DSN says: a report's
    statements run on a server of this run's own, as its per-run user."""
    from .engine.leftovers import sweep_dirs
    from .engine.seam import seam_of

    sweep_dirs()
    with seam_of(engine).embedded() as info:
        yield info


def replay(plan, server, step_timeout: float, output: str | None):
    """Run the plan's schedules until one reproduces the report's cycle (replay/search.py);
    the lesson is written to `output` only then."""
    from .replay.search import replay as search
    from .safe_write import check_writable, write_file

    if output is not None:
        check_writable(output)
    # Where messages place a step: the lesson's lines, not the report's.
    found = search(plan, server, step_timeout, verified_line(server), output or f"{plan.source} replayed")
    if output is not None:
        write_file(output, found.text)
    return found
