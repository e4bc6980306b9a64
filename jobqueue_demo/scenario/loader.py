"""Reads a scenario file into a Scenario, or fails with one line naming file, line and column.

Nothing here connects to a server: a scenario is fully checked before any connection is made.
"""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import sys

from ..engine.seam import DEFAULT_ENGINE, ENGINE_NAMES, seam_of
from ..errors import ScenarioError
from .model import (
    CAPTURE_REF,
    DEFAULT_ENGINES,
    INVARIANT_HOLDS,
    ISOLATION_LEVELS,
    ErrorMatch,
    Expectation,
    Fault,
    Invariant,
    Locks,
    Narration,
    Scenario,
    SessionSpec,
    Span,
    Statement,
    error_match,
)
from .fault_kinds import STEP_FAULTS
from .nearest import nearest
from .sql_guard import refusal



def _imported_on_first_use(name: str):
    """The module, executed only when an attribute of it is first read (importlib's LazyLoader):
    PyYAML costs 15-20 ms of a start, and a .spec file (an isolation spec) never needs it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


yaml = _imported_on_first_use("yaml")


def safe_loader():
    """libyaml's parser, when PyYAML was built with it, reads a lesson several times faster;
    both give the same nodes and marks."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 24
SESSION_NAME_MAX = 32
# Each session is a connection to the server, which may be shared: engine/scratch.py's
# USER_CONNECTIONS bounds the per-run user's connections from it.
MAX_SESSIONS = 16
TOP_KEYS = {
    "title", "summary", "description", "setup", "sessions", "steps", "why", "verified", "invariants", "explore", "engines", "cluster",
}
STATEMENT_KEYS = {"comment", "expect", "capture"}
SESSION_KEYS = {"isolation", "innodb_lock_wait_timeout", "lock_wait_timeout", "node", "wsrep_sync_wait"}
MAX_CLUSTER_NODES = 9
EXPECT_KEYS = {"ok", "columns", "rows", "affected", "error", "waits"}


# An isolation spec's first word, after `#` comments: what no YAML scenario (a mapping) starts with.
SPEC_START = re.compile(r"\A(?:\s*#[^\n]*\n|\s+)*(?:setup|teardown|session)\b(?:\s*#[^\n]*\n|\s+)*[{\w\"]")


def load_scenario(path: str) -> Scenario:
    text = read_text(path)
    if path.endswith(".spec") or (not path.endswith((".yaml", ".yml")) and SPEC_START.match(text)):
        from .spec import scenario_from_spec

        return scenario_from_spec(path, text)
    return scenario_from_text(path, text)


def scenario_from_text(path: str, text: str) -> Scenario:
    """The scenario `text` describes; `path` is where messages say it is."""
    root = compose(path, text)
    return Builder(path, text).scenario(root)


def read_text(path: str) -> str:
    if not os.path.exists(path):
        raise ScenarioError(path, "no such file")
    if os.path.isdir(path):
        raise ScenarioError(path, "is a directory, not a scenario file")
    try:
        # Non-blocking, so that opening a FIFO returns at once and can be refused.
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ScenarioError(path, "not a regular file (a device, FIFO or socket)")
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ScenarioError(path, f"cannot read: {e.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ScenarioError(path, f"too large (over {MAX_BYTES // 1024} KiB); a scenario is a short script")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ScenarioError(path, "not UTF-8 text", line, column) from None
    if not text.strip():
        raise ScenarioError(path, "empty scenario: expected a mapping with title, sessions and steps")
    return text


# What a terminal acts on instead of showing: C0 controls but tab and newline, DEL, C1. YAML
# refuses them raw, but a double-quoted string makes them ("\e]0;...\a", "\x9b", "\r"), and
# the transcript prints a lesson's text as it is.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def compose(path: str, text: str) -> yaml.Node:
    """Parse to nodes, refusing aliases, deep nesting and control characters before anything
    is built from them.

    Aliases are refused outright: a scenario never needs them and they are how a small file
    expands into a huge document.
    """
    depth = 0
    # Read before the try: the first use runs PyYAML's (lazy) import, and a stop signal that cuts
    # it short must not leave the except clauses below naming what the import never made.
    marked, unreadable = yaml.MarkedYAMLError, yaml.reader.ReaderError
    try:
        for event in yaml.parse(text, Loader=safe_loader()):
            if isinstance(event, yaml.AliasEvent):
                _fail_at(path, event.start_mark, "YAML aliases (*name) are not allowed in scenarios")
            if isinstance(event, yaml.ScalarEvent) and (found := CONTROL.search(event.value)):
                _fail_at(path, event.start_mark, f"the control character U+{ord(found.group()):04X} is not allowed: "
                         "a terminal would act on it, not show it (SQL can make one: CHAR(27), chr(27))")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    _fail_at(path, event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        loader = safe_loader()(text)
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()
    except marked as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        _fail_at(path, mark, f"not valid YAML: {problem}")
    except unreadable as e:
        # The only unmarked parse error: its own text spans two lines and gives a character offset
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        message = f"not valid YAML: special character U+{e.character:04X} is not allowed"
        raise ScenarioError(path, message, line, column) from None


def _fail_at(path: str, mark, message: str):
    if mark is None:
        raise ScenarioError(path, message)
    raise ScenarioError(path, message, mark.line + 1, mark.column + 1)


# Every key a step can have besides a session's name.
STEP_WORDS = tuple(sorted(STATEMENT_KEYS | {"narrate", "locks"} | set(STEP_FAULTS)))


def _did_you_mean(word: str, sessions: set[str]) -> str:
    guess = nearest(word, STEP_WORDS) or nearest(word, sessions)
    if guess:
        return f": did you mean '{guess}'?"
    return f" (a step takes one of: {', '.join(STEP_WORDS)}, or a session: {', '.join(sorted(sessions))})"


def _scalar_step_fix(text: str, sessions: set[str]) -> str:
    """What a step written as plain text was probably meant to be: `B BEGIN;` is `B: BEGIN;`."""
    first, _, rest = text.strip().partition(" ")
    if first in sessions and rest:
        return f": did you mean '{first}: {rest.strip()}' (a colon after the session)?"
    guess = None if rest else nearest(first, ("locks", "narrate", *STEP_FAULTS))
    if guess:
        return ": did you mean " + {"locks": "'locks'", "narrate": "'narrate: TEXT'"}.get(guess, f"'{guess}: SESSION'") + "?"
    return " such as 'A: BEGIN;' (a session, a colon, its statement), or narrate, locks or a fault"


class Builder:
    """Reads one file's YAML nodes into the model; every error it finds names the file and line."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.engines: tuple[str, ...] = DEFAULT_ENGINES  # until the file's `engines:` is read

    def fail(self, node: yaml.Node, message: str):
        _fail_at(self.path, node.start_mark, message)

    # -- generic node access -------------------------------------------------

    def mapping(self, node: yaml.Node, what: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{what} must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                self.fail(key, f"{what}: keys must be plain names")
            if key.value in out:
                self.fail(key, f"{what}: duplicate key '{key.value}'")
            out[key.value] = (key, value)
        return out

    def text_of(self, node: yaml.Node, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, f"{what} must be text")
        return node.value

    def int_of(self, node: yaml.Node, what: str, low: int = 0, high: int = 10**9) -> int:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":int"):
            try:
                value = int(node.value)
            except ValueError:
                # YAML 1.1 also tags 0x1f, 0b1, 1:30, 1_ and numbers past Python's digit limit as int
                pass
            else:
                if low <= value <= high:
                    return value
        self.fail(node, f"{what} must be a whole number from {low} to {high}")

    def bool_of(self, node: yaml.Node, what: str) -> bool:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":bool"):
            return node.value.lower() in ("true", "yes", "on")
        self.fail(node, f"{what} must be true or false")

    def cell(self, node: yaml.Node, what: str) -> str | None:
        """A value in an expected row, compared with the server's text form."""
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, f"{what} must be a plain value")
        if node.tag.endswith(":null"):
            return None
        return node.value

    def rows(self, node: yaml.Node, what: str) -> tuple[tuple[str | None, ...], ...]:
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{what} must be a list of rows, each a list of values")
        out = []
        for row in node.value:
            if not isinstance(row, yaml.SequenceNode):
                self.fail(row, f"{what}: each row must be a list of values, e.g. [1, send welcome email]")
            out.append(tuple(self.cell(c, f"{what} value") for c in row.value))
        return tuple(out)

    def span(self, start: yaml.Node, end: yaml.Node) -> Span:
        return Span(start.start_mark.index, end.end_mark.index)

    # -- the scenario ----------------------------------------------------------

    def scenario(self, root: yaml.Node) -> Scenario:
        if root is None:
            raise ScenarioError(self.path, "empty scenario: expected a mapping with title, sessions and steps")
        top = self.mapping(root, "the scenario")
        for key, (knode, _) in top.items():
            if key not in TOP_KEYS:
                self.fail(knode, f"unknown key '{key}' (expected one of: {', '.join(sorted(TOP_KEYS))})")
        for required in ("title", "sessions", "steps"):
            if required not in top:
                self.fail(root, f"missing '{required}'")
        if "engines" in top:
            self.engines = self.engine_list(top["engines"][1])
        sessions = self.sessions(top["sessions"][1])
        names = {s.name for s in sessions}
        cluster = self.cluster(top, sessions)
        setup = self.by_engine(top["setup"][1], "setup", self.setup_sql) if "setup" in top else {}
        steps = self.steps(top["steps"][1], names)
        invariants = self.invariants(top["invariants"][1]) if "invariants" in top else {}
        stamps, stamp_span = self.stamps(top)
        variants: dict[str, Scenario] = {}
        for engine in self.engines:
            variants[engine] = Scenario(
                path=self.path,
                title=self.filled_text(top["title"][1], "title"),
                summary=self.optional_text(top, "summary"),
                description=self.optional_text(top, "description"),
                setup=setup.get(engine) or "",
                why=self.optional_text(top, "why"),
                verified=dict(stamps).get(engine),
                sessions=sessions,
                steps=tuple(step[engine] for step in steps),
                invariants=tuple(i[engine] for i in invariants) if invariants else (),
                explore=self.explore_variant(top["explore"][1]) if "explore" in top else None,
                source=self.text,
                cluster=cluster,
                engine=engine,
                engines=self.engines,
                stamps=stamps,
                verified_span=stamp_span,
                variants=variants,
            )
        return variants[self.engines[0]]

    def cluster(self, top, sessions: tuple[SessionSpec, ...]) -> int | None:
        """`cluster: N` (Galera nodes); every session's `node:` must be one of them."""
        if "cluster" not in top:
            for spec in sessions:
                if spec.node is not None:
                    self.fail(top["sessions"][1], f"session {spec.name} names a node: say how many with 'cluster: N'")
            return None
        size = self.int_of(top["cluster"][1], "cluster", 2, MAX_CLUSTER_NODES)
        for spec in sessions:
            if spec.node is not None and spec.node > size:
                self.fail(top["sessions"][1], f"session {spec.name}: node {spec.node} of a {size}-node cluster")
        return size

    def engine_list(self, node: yaml.Node) -> tuple[str, ...]:
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.fail(node, f"engines must be a list of engine names, e.g. [{', '.join(ENGINE_NAMES)}]")
        out: list[str] = []
        for item in node.value:
            name = self.text_of(item, "an engine name").strip()
            if name not in ENGINE_NAMES:
                self.fail(item, f"engines: unknown engine '{name}' (expected {' or '.join(ENGINE_NAMES)}; mysql means MariaDB and MySQL)")
            if name in out:
                self.fail(item, f"engines: '{name}' is named twice")
            out.append(name)
        return tuple(out)

    def by_engine(self, node: yaml.Node, what: str, parse, complete: bool = True) -> dict:
        """A value written once for every engine of the lesson, or a mapping by engine name
        (`{mysql: ..., postgresql: ...}`): each engine's value, parsed. `complete`: every
        engine of the lesson must have one; otherwise a missing one means none there."""
        if not self.is_engine_mapping(node):
            return {engine: parse(node, what, engine) for engine in self.engines}
        fields = self.mapping(node, what)
        self.check_engine_keys(fields, what)
        missing = [e for e in self.engines if e not in fields]
        if complete and missing:
            self.fail(node, f"{what}: no value for {', '.join(missing)}, an engine of this lesson (engines: [{', '.join(self.engines)}])")
        return {engine: parse(fields[engine][1], f"{what} ({engine})", engine) for engine in self.engines if engine in fields}

    def is_engine_mapping(self, node: yaml.Node) -> bool:
        return isinstance(node, yaml.MappingNode) and any(
            isinstance(k, yaml.ScalarNode) and k.value in ENGINE_NAMES for k, _ in node.value
        )

    def check_engine_keys(self, fields, what: str) -> None:
        for key, (knode, _) in fields.items():
            if key not in ENGINE_NAMES:
                self.fail(knode, f"{what}: '{key}' is not an engine (a mapping by engine takes {', '.join(ENGINE_NAMES)})")
            if key not in self.engines:
                self.fail(knode, f"{what}: {key} is not an engine of this lesson (engines: [{', '.join(self.engines)}])")

    def filled_text(self, node: yaml.Node, what: str, engine: str = "") -> str:
        """Text that says something: an empty title printed `-- : on MariaDB`, an empty
        narration a blank line."""
        text = self.plain_text(node, what)
        if not text:
            self.fail(node, f"{what} is empty")
        return text

    def sql_text(self, node: yaml.Node, what: str) -> str:
        """SQL, which YAML reads as text only: `5` or `true` unquoted is a number or a flag,
        sent as SQL it was the server's error, not the file's."""
        if isinstance(node, yaml.ScalarNode) and not node.tag.endswith(":str"):
            self.fail(node, f"{what} must be SQL text, not {node.value!r} (quote it if it is SQL)")
        if isinstance(node, yaml.MappingNode) and node.value:  # by_engine found no engine's name in it
            key = node.value[0][0]
            self.fail(key, f"{what}: '{getattr(key, 'value', key)}' is not an engine (a mapping by engine takes {', '.join(ENGINE_NAMES)})")
        return self.text_of(node, what).strip()

    def plain_text(self, node: yaml.Node, what: str, engine: str = "") -> str:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return ""
        return self.text_of(node, what).strip()

    def stamps(self, top) -> tuple[tuple[tuple[str, str], ...], Span | None]:
        """`verified:` by engine; the old single text is the MariaDB/MySQL stamp."""
        if "verified" not in top:
            return (), None
        knode, vnode = top["verified"]
        if isinstance(vnode, yaml.MappingNode):
            fields = self.mapping(vnode, "verified")
            self.check_engine_keys(fields, "verified")
            found = {e: self.plain_text(fields[e][1], f"verified ({e})") for e in fields}
        else:
            found = {DEFAULT_ENGINE: self.plain_text(vnode, "verified")}
        return tuple((e, found[e]) for e in ENGINE_NAMES if found.get(e)), self.span(knode, vnode)

    def explore_variant(self, node: yaml.Node) -> str:
        """The name of a lesson written to be explored: next to this file, or shipped."""
        from .lessons import lesson_dirs

        name = self.text_of(node, "explore").strip()
        folders = [os.path.dirname(os.path.abspath(self.path)), *map(str, lesson_dirs())]
        if not name or os.sep in name or not any(os.path.isfile(os.path.join(f, f"{name}.yaml")) for f in folders):
            self.fail(node, f"explore: no lesson '{name}' next to this one or shipped ({name}.yaml)")
        return name

    def optional_text(self, top, key: str) -> str:
        if key not in top:
            return ""
        node = top[key][1]
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return ""
        return self.text_of(node, key).strip()

    def sessions(self, node: yaml.Node) -> tuple[SessionSpec, ...]:
        if isinstance(node, yaml.SequenceNode):
            specs = [SessionSpec(self.session_name(n)) for n in node.value]
        else:
            specs = [self.session_spec(k, v) for k, v in self.mapping(node, "sessions").values()]
        if not specs:
            self.fail(node, "sessions: name at least one session, e.g. [A, B]")
        if len(specs) > MAX_SESSIONS:
            extra = node.value[MAX_SESSIONS]
            self.fail(extra if isinstance(node, yaml.SequenceNode) else extra[0],
                      f"sessions: {len(specs)} of them, at most {MAX_SESSIONS} (each is a connection to the server)")
        seen = set()
        for spec, n in zip(specs, node.value):
            if spec.name in seen:
                self.fail(n if isinstance(node, yaml.SequenceNode) else n[0], f"session '{spec.name}' is declared twice")
            seen.add(spec.name)
        return tuple(specs)

    def session_name(self, node: yaml.Node) -> str:
        name = self.text_of(node, "a session name")
        if not (name.isidentifier() and len(name) <= SESSION_NAME_MAX) or name in TOP_KEYS | STATEMENT_KEYS:
            self.fail(node, f"'{name}' is not a usable session name (letters, digits, _; e.g. A, B, worker1)")
        if name in STEP_FAULTS or name in ("narrate", "locks"):
            self.fail(node, f"'{name}' is a step keyword and cannot name a session")
        return name

    def session_spec(self, key: yaml.Node, value: yaml.Node) -> SessionSpec:
        name = self.session_name(key)
        if isinstance(value, yaml.ScalarNode) and value.tag.endswith(":null"):
            return SessionSpec(name)
        fields = self.mapping(value, f"session {name}")
        for k, (knode, _) in fields.items():
            if k not in SESSION_KEYS:
                self.fail(knode, f"session {name}: unknown setting '{k}' (expected {', '.join(sorted(SESSION_KEYS))})")
        isolation = None
        if "isolation" in fields:
            inode = fields["isolation"][1]
            isolation = self.text_of(inode, "isolation").strip().lower().replace(" ", "-").replace("_", "-")
            if isolation not in ISOLATION_LEVELS:
                self.fail(inode, f"isolation must be one of {', '.join(ISOLATION_LEVELS)}")
        timeouts = {
            k: self.int_of(fields[k][1], k, 1, 31536000) for k in ("innodb_lock_wait_timeout", "lock_wait_timeout") if k in fields
        }
        if "node" in fields:
            timeouts["node"] = self.int_of(fields["node"][1], "node", 1, MAX_CLUSTER_NODES)
        if "wsrep_sync_wait" in fields:
            timeouts["wsrep_sync_wait"] = self.int_of(fields["wsrep_sync_wait"][1], "wsrep_sync_wait", 0, 15)
        return SessionSpec(name, isolation, **timeouts)

    def steps(self, node: yaml.Node, names: set[str]) -> list[dict]:
        """Each step as each engine of the lesson runs it."""
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.fail(node, "steps must be a non-empty list")
        steps = [self.step(n, names) for n in node.value]
        for engine in self.engines:
            self.check_captures([step[engine] for step in steps], node.value)
        return steps

    def check_captures(self, steps, nodes) -> None:
        """A `:name` no earlier statement of its session captured would reach the server as SQL."""
        captured: dict[str, list[str]] = {}
        for step, node in zip(steps, nodes):
            if not isinstance(step, Statement):
                continue
            known = captured.setdefault(step.session, [])
            for name in CAPTURE_REF.findall(step.sql):
                if name not in known:
                    have = f"it captures {', '.join(known)}" if known else "it captures nothing"
                    self.fail(node, f"{step.session}'s statement uses :{name}, but no earlier step of {step.session} "
                              f"captures '{name}' ({have} before this step)")
            if step.capture:
                known.append(step.capture)

    def step(self, node: yaml.Node, names: set[str]) -> dict:
        """The step for each engine of the lesson."""
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode) and node.value == "locks":
            return self.same(Locks(line))
        if isinstance(node, yaml.ScalarNode):
            self.fail(node, f"a step must be a mapping{_scalar_step_fix(node.value, names)}")
        fields = self.mapping(node, "a step")
        if "narrate" in fields:
            self.only(fields, {"narrate"}, "a narrate step")
            texts = self.by_engine(fields["narrate"][1], "narrate", self.filled_text)
            return {engine: Narration(text, line) for engine, text in texts.items()}
        if "locks" in fields:
            self.only(fields, {"locks"}, "a locks step")
            return self.same(Locks(line))
        for action in STEP_FAULTS:
            if action in fields:
                self.only(fields, {action}, f"a {action} step")
                vnode = fields[action][1]
                session = self.text_of(vnode, action)
                if session not in names:
                    self.fail(vnode, f"{action}: '{session}' is not a declared session ({', '.join(sorted(names))})")
                return self.same(Fault(action, session, line))
        return self.statement(node, fields, names)

    def same(self, step) -> dict:
        return {engine: step for engine in self.engines}

    def only(self, fields, allowed: set[str], what: str):
        for k, (knode, _) in fields.items():
            if k not in allowed:
                self.fail(knode, f"{what} takes no '{k}'")

    def statement(self, node: yaml.Node, fields, names: set[str]) -> dict:
        sessions = [k for k in fields if k not in STATEMENT_KEYS]
        unknown = [k for k in sessions if k not in names]
        if len(sessions) > 1 and unknown or len(sessions) == 1 and unknown and nearest(unknown[0], STEP_WORDS):
            key = unknown[0]
            self.fail(fields[key][0], f"unknown key '{key}' in a step{_did_you_mean(key, names)}")
        if len(sessions) != 1:
            self.fail(node, "a step names one session (e.g. 'A: BEGIN;'), or is narrate, locks or a fault")
        name = sessions[0]
        knode, snode = fields[name]
        if name not in names:
            self.fail(knode, f"step for undeclared session '{name}' (declared: {', '.join(sorted(names))})")
        sqls = self.by_engine(snode, f"{name}'s statement", self.statement_sql)
        expects: dict = {}
        expect_span = None
        shared = True
        if "expect" in fields:
            ek, ev = fields["expect"]
            shared = not self.is_engine_mapping(ev)
            expects = self.by_engine(ev, "expect", self.expectation, complete=False)
            expect_span = self.span(ek, ev)
        comments = self.by_engine(fields["comment"][1], "comment", self.plain_text, complete=False) if "comment" in fields else {}
        capture = None
        if "capture" in fields:
            cnode = fields["capture"][1]
            capture = self.text_of(cnode, "capture")
            if not capture.isidentifier():
                self.fail(cnode, "capture must be a name (letters, digits, _)")
        return {
            engine: Statement(
                session=name,
                sql=sqls[engine],
                line=knode.start_mark.line + 1,
                comment=comments.get(engine) or None,
                expect=expects.get(engine),
                capture=capture,
                span=self.span(node, node),
                expect_span=expect_span,
                expect_others=tuple((e, expects.get(e)) for e in self.engines if e != engine),
                expect_shared=shared,
            )
            for engine in self.engines
        }

    def statement_sql(self, node: yaml.Node, what: str, engine: str = "") -> str:
        sql = self.sql_text(node, what)
        if not sql.replace(";", " ").strip():  # `;` alone: the server's "Query was empty", at run time
            self.fail(node, f"{what} is empty")
        self.check_sql(node, what, engine)
        return sql

    def setup_sql(self, node: yaml.Node, what: str, engine: str = "") -> str:
        sql = "" if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") else self.sql_text(node, what)
        if sql:
            self.check_sql(node, what, engine)
        return sql

    def check_sql(self, node: yaml.Node, what: str, engine: str) -> None:
        """Scenario SQL may not do what sql_guard refuses, told on the line it does it."""
        found = refusal(node.value, engine)
        if found is None:
            return
        block = node.style in ("|", ">")  # its text starts on the line after the indicator
        line = node.start_mark.line + 1 + block + node.value.count("\n", 0, found[0])
        raise ScenarioError(self.path, f"{what}: {found[1]}", line)

    def expectation(self, node: yaml.Node, what: str, engine: str) -> Expectation:
        """One engine's expectation: an error's spelling is resolved for that engine."""
        if isinstance(node, yaml.ScalarNode) and node.value == "ok":
            return Expectation(ok=True)
        if isinstance(node, yaml.ScalarNode):
            said = f"'{node.value}'" if node.value else "empty"
            self.fail(node, f"expect is {said}: write 'expect: ok', or a mapping such as {{affected: 1}} or {{error: deadlock}}")
        fields = self.mapping(node, "expect")
        for k, (knode, _) in fields.items():
            if k not in EXPECT_KEYS:
                self.fail(knode, f"expect: unknown key '{k}' (expected {', '.join(sorted(EXPECT_KEYS))})")
        values = {}
        if "ok" in fields:
            values["ok"] = self.bool_of(fields["ok"][1], "expect ok")
        if "columns" in fields:
            cnode = fields["columns"][1]
            if not isinstance(cnode, yaml.SequenceNode):
                self.fail(cnode, "expect columns must be a list of names")
            values["columns"] = tuple(self.text_of(c, "a column name") for c in cnode.value)
        if "rows" in fields:
            values["rows"] = self.rows(fields["rows"][1], "expect rows")
        if "affected" in fields:
            values["affected"] = self.int_of(fields["affected"][1], "expect affected")
        if "error" in fields:
            values["error"] = self.error(fields["error"][1], engine, shared=what == "expect" and len(self.engines) > 1)
        if "waits" in fields:
            values["waits"] = self.bool_of(fields["waits"][1], "expect waits")
        if "error" in values and ({"rows", "columns", "affected"} & values.keys() or values.get("ok")):
            self.fail(node, "expect: an error cannot be expected together with rows, affected or ok")
        return Expectation(**values)

    def error(self, node: yaml.Node, engine: str, shared: bool) -> ErrorMatch:
        spelling = self.text_of(node, "expect error")
        try:
            return error_match(spelling, engine)
        except (KeyError, ValueError):
            # ValueError: text like '²' passes isdigit() but not int()
            self.fail(node, self.unknown_error(spelling, engine, shared))

    @staticmethod
    def unknown_error(spelling: str, engine: str, shared: bool) -> str:
        errors = seam_of(engine).errors
        guess = nearest(spelling, (*errors.CLASSES, *errors.NAMES))
        if guess:
            message = f"expect error: unknown error '{spelling}' on {engine}: did you mean '{guess}'?"
        else:
            message = f"expect error: unknown error '{spelling}' on {engine}; use {errors.SPELT_AS} or one of {errors.known_spellings()}"
        if shared:
            message += "; or write the expectation per engine: {mysql: {error: 1205}, postgresql: {error: 55P03}}"
        return message

    def invariants(self, node: yaml.Node) -> list[dict]:
        """Each invariant as each engine checks it (its `sql` may be written per engine)."""
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, "invariants must be a list of {name, sql, expect}")
        out = []
        for item in node.value:
            fields = self.mapping(item, "an invariant")
            for required in ("name", "sql", "expect"):
                if required not in fields:
                    self.fail(item, f"an invariant needs '{required}'")
            self.only(fields, {"name", "sql", "expect", "holds"}, "an invariant")
            holds = "always"
            if "holds" in fields:
                hnode = fields["holds"][1]
                holds = self.text_of(hnode, "invariant holds").strip()
                if holds not in INVARIANT_HOLDS:
                    self.fail(hnode, f"invariant holds must be one of {', '.join(INVARIANT_HOLDS)}")
            name = self.text_of(fields["name"][1], "invariant name").strip()
            expect = self.rows(fields["expect"][1], "invariant expect")
            sqls = self.by_engine(fields["sql"][1], "invariant sql", self.statement_sql)
            line = item.start_mark.line + 1
            out.append({engine: Invariant(name, sql, expect, line, holds) for engine, sql in sqls.items()})
        return out
