"""PostgreSQL isolation test specs (`.spec`) read as scenarios.

The grammar is isolationtester's (PostgreSQL 14 and later, src/test/isolation/README):

    setup { SQL }*  [teardown { SQL }]
    session NAME [setup { SQL }] (step NAME { SQL })+ [teardown { SQL }]   (one or more)
    permutation STEP[(BLOCKER, ...)] ...                                     (any number)

NAME is an identifier or a "quoted" one; a BLOCKER is `*` (the step is reported waiting
once, whatever happens), another step's name (the step is not reported complete while that
one runs) or `NAME notices N` (nor before that step's session has sent N notices). `#`
starts a comment outside SQL; an SQL block runs from `{` to the first `}`, spaces (not
newlines) trimmed at both ends, exactly as isolationtester prints it back. Where
isolationtester stops with "syntax error at line N", the loader raises ScenarioError with
FILE:LINE, as for a YAML scenario.

The Scenario made from a spec keeps the parsed spec (`Scenario.spec`), which run/spec_run.py
runs permutation by permutation as isolationtester does; its plain `steps` (every session's
setup then steps, in session order) and joined `setup` are what explore and the transcript's
other commands read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..errors import ScenarioError
from .model import Invariant, Scenario, SessionSpec, Statement
from .sql_guard import refusal

KEYWORDS = ("notices", "permutation", "session", "setup", "step", "teardown")
# Any character past ASCII as a letter, as PostgreSQL's scanner takes every byte from 0x80; as
# a negated class, since a range up to U+10FFFF takes 13 ms to compile.
_IDENT = re.compile(r"(?:[A-Za-z_]|[^\x00-\x7f])(?:[A-Za-z_0-9$]|[^\x00-\x7f])*")
_SPACE = " \t\r\f"
# Superuser-only settings a spec may set as written (isolation specs set deadlock_timeout to
# choose a deadlock's victim): the per-run role is granted SET on these alone (PostgreSQL 15's
# GRANT SET ON PARAMETER), and only when the spec's SQL names one.
GRANTABLE_SETTINGS = ("deadlock_timeout",)
# `#@mysql { SQL }` after a block: that block's body on MariaDB/MySQL (a comment to isolationtester).
MYSQL_BODY = "#@mysql"
# `#@invariant NAME { SQL }` on a line of its own: a check explore runs after every permutation,
# which holds while its SQL returns no row (a comment to isolationtester).
INVARIANT = "#@invariant"


@dataclass
class Blocker:
    """A permutation step's annotation: `*`, another step's name, or that step with `notices`."""

    step: str | None  # None for `*`
    notices: int | None = None
    line: int = 0


@dataclass
class PermutationStep:
    name: str
    blockers: tuple[Blocker, ...] = ()
    line: int = 0


@dataclass
class SpecStep:
    name: str
    session: str
    sql: str
    line: int


@dataclass
class SpecSession:
    name: str
    line: int
    setup: str | None = None
    teardown: str | None = None
    steps: list[SpecStep] = field(default_factory=list)


@dataclass
class Spec:
    """An isolation spec as isolationtester reads it."""

    setups: list[str]
    teardown: str | None
    sessions: list[SpecSession]
    permutations: list[list[PermutationStep]]
    settings: tuple[str, ...] = ()  # of GRANTABLE_SETTINGS, the ones its SQL sets
    # MariaDB/MySQL bodies (`#@mysql`) by the block they replace: ("setup", i), ("teardown",),
    # ("session setup", name), ("session teardown", name), ("step", name).
    mysql: dict = field(default_factory=dict)
    # Watched as isolationtester watches a step (PostgreSQL's pg_isolation_test_session_is_blocked,
    # notices, NOTIFYs); False for the MySQL variant, watched through its engine's wait monitor.
    isolationtester: bool = True
    invariants: tuple[Invariant, ...] = ()  # `#@invariant` lines, for explore

    def for_mysql(self) -> Spec:
        """The spec with every block that has a MySQL body given it; the others as they are."""
        body = self.mysql.get

        def session(s: SpecSession) -> SpecSession:
            steps = [replace(st, sql=body(("step", st.name), st.sql)) for st in s.steps]
            return replace(s, setup=body(("session setup", s.name), s.setup),
                           teardown=body(("session teardown", s.name), s.teardown), steps=steps)

        return replace(self, setups=[body(("setup", i), sql) for i, sql in enumerate(self.setups)],
                       teardown=body(("teardown",), self.teardown), sessions=[session(s) for s in self.sessions],
                       settings=(), mysql={}, isolationtester=False)

    def steps(self) -> dict[str, SpecStep]:
        return {s.name: s for session in self.sessions for s in session.steps}

    def schedules(self) -> list[list[PermutationStep]]:
        """The permutations written, or else every interleaving of the sessions' steps in
        isolationtester's order: depth first, the lowest session's next step first."""
        if self.permutations:
            return self.permutations
        piles = [list(s.steps) for s in self.sessions]
        found: list[list[PermutationStep]] = []

        def extend(taken: list[PermutationStep], next_of: list[int]) -> None:
            more = False
            for i, pile in enumerate(piles):
                if next_of[i] < len(pile):
                    more = True
                    next_of[i] += 1
                    extend(taken + [PermutationStep(pile[next_of[i] - 1].name)], next_of)
                    next_of[i] -= 1
            if not more:
                found.append(taken)

        extend([], [0] * len(piles))
        return found


@dataclass
class _Token:
    kind: str  # a keyword, "ident", "sql", "int", or one of , ( ) *
    text: str
    line: int


class _Lexer:
    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.invariants: list[Invariant] = []

    def fail(self, line: int, message: str):
        raise ScenarioError(self.path, message, line)

    def tokens(self) -> list[_Token]:
        text, i, line, found = self.text, 0, 1, []
        while i < len(text):
            c = text[i]
            if c == "\n":
                line += 1
                i += 1
            elif c in _SPACE:
                i += 1
            elif text.startswith(MYSQL_BODY, i):
                i = self._mysql_body(i, line, found)
            elif text.startswith(INVARIANT, i):
                i = self._invariant(i, line)
            elif c == "#":
                end = text.find("\n", i)
                i = len(text) if end < 0 else end
            elif c == '"':
                i, name = self._quoted(i, line)
                found.append(_Token("ident", name, line))
            elif c == "{":
                start_line = line
                i += 1
                while i < len(text) and text[i] in _SPACE:
                    i += 1
                end = text.find("}", i)
                if end < 0:
                    self.fail(start_line, "unterminated sql block")
                body = text[i:end].rstrip(_SPACE)
                line += text.count("\n", i, end)
                found.append(_Token("sql", body, start_line))
                i = end + 1
            elif c.isdigit() and c.isascii():
                j = i
                while j < len(text) and text[j].isdigit() and text[j].isascii():
                    j += 1
                found.append(_Token("int", text[i:j], line))
                i = j
            elif c in ",()*":
                found.append(_Token(c, c, line))
                i += 1
            else:
                m = _IDENT.match(text, i)
                if m is None:
                    self.fail(line, f'syntax error: unexpected character "{c}"')
                word = m.group()
                found.append(_Token(word if word in KEYWORDS else "ident", word, line))
                i = m.end()
        return found

    def _mysql_body(self, i: int, line: int, found: list) -> int:
        """`#@mysql { SQL }`: a comment to isolationtester, the MySQL body of the block before."""
        text = self.text
        end = text.find("\n", i)
        end = len(text) if end < 0 else end
        rest = text[i + len(MYSQL_BODY):end].strip(_SPACE)
        if not (rest.startswith("{") and rest.endswith("}")) or "}" in rest[:-1]:
            self.fail(line, f"{MYSQL_BODY}: expected {{ SQL }} on the same line")
        found.append(_Token(MYSQL_BODY, rest[1:-1].strip(_SPACE), line))
        return end

    def _invariant(self, i: int, line: int) -> int:
        """`#@invariant NAME { SQL }`, on one line: kept aside, the grammar never sees it."""
        text = self.text
        end = text.find("\n", i)
        end = len(text) if end < 0 else end
        rest = text[i + len(INVARIANT):end].strip(_SPACE)
        name = _IDENT.match(rest)
        body = rest[name.end():].strip(_SPACE) if name else ""
        if name is None or not (body.startswith("{") and body.endswith("}")) or "}" in body[:-1]:
            self.fail(line, f"{INVARIANT}: expected NAME {{ SQL }} on the same line")
        sql = body[1:-1].strip(_SPACE)
        if not sql:
            self.fail(line, f"{INVARIANT} {name.group()}: its SQL is empty")
        if any(known.name == name.group() for known in self.invariants):
            self.fail(line, f"duplicate invariant name: {name.group()}")
        self.invariants.append(Invariant(name.group(), sql, (), line))
        return end

    def _quoted(self, i: int, line: int) -> tuple[int, str]:
        text, name = self.text, []
        i += 1
        while True:
            if i >= len(text):
                self.fail(line, "unterminated quoted identifier")
            c = text[i]
            if c == "\n":
                self.fail(line, "unexpected newline in quoted identifier")
            if c == '"':
                if text.startswith('""', i):
                    name.append('"')
                    i += 2
                    continue
                return i + 1, "".join(name)
            name.append(c)
            i += 1


class _Parser:
    def __init__(self, path: str, text: str):
        self.path = path
        lexer = _Lexer(path, text)
        self.tokens = lexer.tokens()
        self.invariants = tuple(lexer.invariants)
        self.at = 0
        self.last_line = text.count("\n") + 1
        self.mysql: dict = {}

    def fail(self, message: str, line: int | None = None):
        raise ScenarioError(self.path, message, line if line is not None else self._line())

    def _line(self) -> int:
        return self.tokens[self.at].line if self.at < len(self.tokens) else self.last_line

    def peek(self) -> str | None:
        return self.tokens[self.at].kind if self.at < len(self.tokens) else None

    def take(self, kind: str, what: str) -> _Token:
        if self.peek() == MYSQL_BODY and kind != MYSQL_BODY:
            self.fail(f"syntax error: unexpected {MYSQL_BODY}: it gives the block just above it a MySQL body")
        if self.peek() != kind:
            found = self.tokens[self.at].text if self.at < len(self.tokens) else "end of file"
            self.fail(f"syntax error: expected {what}, found {_short(found)}")
        self.at += 1
        return self.tokens[self.at - 1]

    def sql(self, what: str, key: tuple | None = None) -> str:
        text = self.take("sql", f"{{ SQL }} after {what}").text
        if self.peek() == MYSQL_BODY:
            token = self.tokens[self.at]
            self.at += 1
            if key is None:
                self.fail(f"{MYSQL_BODY} gives a block a MySQL body; {what} has none", token.line)
            self.mysql[key] = token.text
        return text

    def spec(self) -> Spec:
        setups = []
        while self.peek() == "setup":
            self.at += 1
            setups.append(self.sql("setup", ("setup", len(setups))))
        teardown = self._optional("teardown", ("teardown",))
        sessions = []
        while self.peek() == "session":
            sessions.append(self.session())
        if not sessions:
            self.take("session", "a session")  # tells what is there instead
            self.fail("syntax error: expected a session (setup, teardown, then session NAME ... step NAME { SQL })")
        permutations = []
        while self.peek() == "permutation":
            permutations.append(self.permutation())
        if self.peek() is not None:
            self.take("end of file", "a session, a permutation or the end of the spec (in that order)")
        return Spec(setups, teardown, sessions, permutations, mysql=self.mysql, invariants=self.invariants)

    def _optional(self, keyword: str, key: tuple) -> str | None:
        if self.peek() != keyword:
            return None
        self.at += 1
        return self.sql(keyword, key)

    def session(self) -> SpecSession:
        line = self.take("session", "session").line
        name = self.take("ident", "a session name").text
        session = SpecSession(name, line, setup=self._optional("setup", ("session setup", name)))
        while self.peek() == "step":
            step_line = self.take("step", "step").line
            step_name = self.take("ident", "a step name").text
            sql = self.sql(f"step {step_name}", ("step", step_name))
            session.steps.append(SpecStep(step_name, name, sql, step_line))
        if not session.steps:
            self.fail(f"syntax error: session {name} has no step (step NAME {{ SQL }})")
        session.teardown = self._optional("teardown", ("session teardown", name))
        return session

    def permutation(self) -> list[PermutationStep]:
        line = self.take("permutation", "permutation").line
        steps = []
        while self.peek() == "ident":
            token = self.take("ident", "a step name")
            steps.append(PermutationStep(token.text, self.blockers(), token.line))
        if not steps:
            self.fail("syntax error: a permutation names at least one step", line)
        return steps

    def blockers(self) -> tuple[Blocker, ...]:
        if self.peek() != "(":
            return ()
        self.at += 1
        found = []
        while True:
            line = self._line()
            if self.peek() == "*":
                self.at += 1
                found.append(Blocker(None, line=line))
            else:
                name = self.take("ident", "a blocking step's name or *").text
                notices = None
                if self.peek() == "notices":
                    self.at += 1
                    notices = int(self.take("int", "a number of notices").text)
                found.append(Blocker(name, notices, line))
            if self.peek() == ")":
                self.at += 1
                return tuple(found)
            self.take(",", ", or )")


def _short(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else text
    return repr(first[:40] + ("..." if len(first) > 40 else ""))


def spec_permutations(spec: Spec) -> int:
    """How many permutations isolationtester runs for the spec: those written, or every
    interleaving of its sessions' steps (counted, not listed)."""
    if spec.permutations:
        return len(spec.permutations)
    from math import factorial

    counts = [len(s.steps) for s in spec.sessions]
    total = factorial(sum(counts))
    for count in counts:
        total //= factorial(count)
    return total


def parse_spec(path: str, text: str) -> Spec:
    """The spec `text` holds, checked as isolationtester checks it before connecting."""
    spec = _Parser(path, text).spec()
    _check(path, spec)
    return spec


def _check(path: str, spec: Spec) -> None:
    seen: dict[str, SpecStep] = {}
    sessions: dict[str, SpecSession] = {}
    for session in spec.sessions:
        if session.name in sessions:
            raise ScenarioError(path, f"duplicate session name: {session.name}", session.line)
        sessions[session.name] = session
        for step in session.steps:
            if step.name in seen:
                raise ScenarioError(path, f"duplicate step name: {step.name} (first at line {seen[step.name].line})", step.line)
            seen[step.name] = step
    for permutation in spec.permutations:
        names = {p.name for p in permutation}
        for p in permutation:
            if p.name not in seen:
                raise ScenarioError(path, f'undefined step "{p.name}" specified in permutation', p.line)
            for b in p.blockers:
                if b.step is None:
                    continue
                if b.step not in names:
                    raise ScenarioError(
                        path, f'undefined blocking step "{b.step}" referenced in permutation step "{p.name}"', b.line
                    )
                if seen[b.step].session == seen[p.name].session:
                    raise ScenarioError(path, f'permutation step "{p.name}" cannot block on its own session', b.line)


def _sql_blocks(spec: Spec) -> list[str]:
    blocks = list(spec.setups) + ([spec.teardown] if spec.teardown else []) + [i.sql for i in spec.invariants]
    for session in spec.sessions:
        blocks += [b for b in (session.setup, session.teardown) if b]
        blocks += [s.sql for s in session.steps]
    return blocks


def _guard(path: str, text: str, spec: Spec, engine: str) -> None:
    """sql_guard's refusals, as for a YAML scenario's SQL, told on the block's line."""
    for block in _sql_blocks(spec):
        found = refusal(block, engine)
        if found is not None:
            at = text.find(block)
            line = text.count("\n", 0, at) + 1 + block.count("\n", 0, found[0]) if at >= 0 else None
            raise ScenarioError(path, found[1], line)


def _settings(spec: Spec) -> tuple[str, ...]:
    sql = "\n".join(_sql_blocks(spec))
    return tuple(s for s in GRANTABLE_SETTINGS if re.search(rf"\b{s}\b", sql, re.IGNORECASE))


def scenario_from_spec(path: str, text: str) -> Scenario:
    """A Scenario for PostgreSQL holding the spec; its steps are each session's setup and
    steps in session order, the order explore interleaves them in."""
    spec = parse_spec(path, text)
    _guard(path, text, spec, "postgresql")
    spec = replace(spec, settings=_settings(spec))
    if not spec.mysql:
        return _scenario(path, text, spec, "postgresql", ("postgresql",))
    mysql = spec.for_mysql()
    _guard(path, text, mysql, "mysql")
    engines = ("postgresql", "mysql")
    variants = {"postgresql": _scenario(path, text, spec, "postgresql", engines), "mysql": _scenario(path, text, mysql, "mysql", engines)}
    for variant in variants.values():
        variant.variants = variants
    return variants["postgresql"]


def _scenario(path: str, text: str, spec: Spec, engine: str, engines: tuple[str, ...]) -> Scenario:
    steps = []
    for session in spec.sessions:
        if session.setup:
            steps.append(Statement(session.name, session.setup, session.line))
        steps += [Statement(session.name, s.sql, s.line, comment=s.name) for s in session.steps]
    return Scenario(
        path=path,
        title=path.rsplit("/", 1)[-1],
        sessions=tuple(SessionSpec(s.name) for s in spec.sessions),
        steps=tuple(steps),
        setup=";\n".join(spec.setups),
        source=text,
        engine=engine,
        engines=engines,
        spec=spec,
        invariants=spec.invariants,
    )


def expected_outputs(path: str) -> list[str]:
    """The files a spec's isolationtester output may equal, as PostgreSQL keeps them: NAME.out
    beside NAME.spec, else in ../expected/ (src/test/isolation's layout); each with its
    alternatives NAME_1.out ... NAME_9.out (pg_regress's, for outputs that differ by platform)."""
    import os

    folder, name = os.path.split(path)
    stem = os.path.splitext(name)[0]
    for place in (folder, os.path.join(folder, os.pardir, "expected")):
        found = [os.path.join(place, f"{stem}{suffix}.out") for suffix in ("", *(f"_{i}" for i in range(1, 10)))]
        found = [f for f in found if os.path.isfile(f)]
        if found:
            return found
    return []
