"""Reads a queue file (docs/queue-format.md): the user's own job-queue SQL, per engine, checked
whole with file:line errors before anything connects.

The file's SQL is untrusted as a scenario's is: every statement passes sql_guard's check, may
not name the tool's own objects (`jqd_...`, where the tool records each job's effect) and may
not end or begin the transactions the tool opens around it. Parameters (`:job`, `:jobs`,
`:batch`, `:worker`) are found here, outside quotes and comments, so binding one at run time
is a join of integers into known places, never a text search.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..engine import mysql
from ..engine.seam import ENGINE_NAMES
from ..engine.sql_lexer import END, OPEN, PUNCT, UNCLEAR, WORD, tokens
from ..errors import ScenarioError, UsageError
from .loader import Builder, compose, read_text
from .nearest import nearest
from .sql_guard import refusal

TOP_KEYS = {
    "title", "models", "summary", "engines", "work", "setup", "enqueue", "claim", "complete", "fail", "retry", "rescue",
    "rescue_ms",
}
WORK_MODES = {
    "in-claim": "the job's effect runs inside the claim transaction and commits with the completion",
    "after-commit": "the claim commits first; the effect runs after it, then the completion in a transaction of its own",
}
# Which parameters each part may use; `claim`'s :job and :jobs only after its first statement.
PARAMS = {
    "setup": (),
    "enqueue": ("job",),
    "claim": ("job", "jobs", "batch", "worker"),
    "complete": ("job", "worker"),
    "fail": ("job", "worker"),
    "retry": ("job", "worker"),
    "rescue": ("job", "jobs", "worker"),
}
REQUIRED = ("setup", "enqueue", "claim", "complete")
MAX_RESCUE_MS = 600_000
TOOL_NAME = re.compile(r"jqd_", re.IGNORECASE)
# The tool begins and ends each transaction: a statement doing so itself would commit the
# tool's record of the job's effect where the file's `work:` says it may not be.
TRANSACTION_WORDS = {"BEGIN", "START", "COMMIT", "ROLLBACK", "END", "SAVEPOINT", "RELEASE", "ABORT", "XA"}


@dataclass(frozen=True)
class QueueStatement:
    """One statement of the file, its parameters' places found at load."""

    sql: str
    line: int
    params: tuple[tuple[int, int, str], ...] = ()  # (start, end, name) in sql order

    def uses(self, name: str) -> bool:
        return any(p[2] == name for p in self.params)

    def bind(self, values: dict[str, str]) -> str:
        """The statement with each parameter replaced by its value (integers, or a list of them)."""
        out, at = [], 0
        for start, end, name in self.params:
            out += [self.sql[at:start], values[name]]
            at = end
        out.append(self.sql[at:])
        return "".join(out)


@dataclass(frozen=True)
class QueueSql:
    """One engine's queue: what a worker, the enqueuer and the rescuer run."""

    setup: tuple[QueueStatement, ...]
    enqueue: tuple[QueueStatement, ...]
    claim: tuple[QueueStatement, ...]
    complete: tuple[QueueStatement, ...]
    fail: tuple[QueueStatement, ...] = ()
    retry: tuple[QueueStatement, ...] = ()
    rescue: tuple[QueueStatement, ...] = ()
    rescue_ms: float = 0.0
    work: str = "in-claim"


@dataclass(frozen=True)
class QueueFile:
    path: str
    title: str
    models: str
    engines: tuple[str, ...]
    variants: dict[str, QueueSql] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1].rsplit(".", 1)[0]

    def for_engine(self, engine: str) -> QueueSql:
        if engine not in self.variants:
            raise UsageError(f"{self.path}: no SQL for {engine} (the file's engines: {', '.join(self.engines)})")
        return self.variants[engine]


def queue_dir() -> Path:
    """The shipped queue files: the installed package data, else a checkout's queues/ (never both,
    as lessons.lesson_dirs)."""
    here = Path(__file__).resolve().parent.parent
    installed = here / "queues"
    return installed if installed.is_dir() else here.parent / "queues"


def resolve_queue(name: str) -> str:
    """A path as given, or the name of a shipped queue file (`river`, `read-then-mark-bug`)."""
    if os.path.exists(name) or os.sep in name or name.endswith((".yaml", ".yml")):
        return name
    candidate = queue_dir() / f"{name}.yaml"
    if candidate.is_file():
        return str(candidate)
    guess = nearest(name, (p.stem for p in queue_dir().glob("*.yaml")))
    hint = f"did you mean '{guess}'?" if guess else "the shipped ones are in queues/"
    raise ScenarioError(name, f"no such file, and no shipped queue file of that name ({hint})")


def load_queue_file(path: str) -> QueueFile:
    path = resolve_queue(path)
    text = read_text(path)
    return queue_from_text(path, text)


def queue_from_text(path: str, text: str) -> QueueFile:
    root = compose(path, text)
    if root is None:
        raise ScenarioError(path, "empty queue file: expected a mapping with setup, enqueue, claim and complete")
    return _QueueBuilder(path, text).queue(root)


def split_statements(sql: str, engine: str) -> list[tuple[int, str]]:
    """(offset, text) of each `;`-separated statement of a block, empty ones left out; None
    when the text cannot be cut with certainty (an open quote, dollar quoting)."""
    pieces, start = [], 0
    for kind, tstart, tend, _ in tokens(sql, mysql=engine == mysql.NAME):
        if kind in (OPEN, UNCLEAR):
            return None
        if kind == END:
            pieces.append((start, sql[start:tstart]))
            start = tend
    pieces.append((start, sql[start:]))
    out = []
    for offset, piece in pieces:
        stripped = piece.strip()
        if stripped:
            out.append((offset + piece.index(stripped[0]), stripped))
    return out


def find_params(sql: str, engine: str) -> list[tuple[int, int, str]] | None:
    """(start, end, name) of each `:name` outside quotes and comments (`::type` is a cast, not
    one); None when the reading is unsure."""
    found = list(tokens(sql, mysql=engine == mysql.NAME))
    if any(t[0] in (OPEN, UNCLEAR) for t in found):
        return None
    params = []
    for before, colon, word in zip([None, *found], found, [*found[1:], None]):
        if colon[0] != PUNCT or colon[3] != ":" or word is None or word[0] != WORD or word[1] != colon[2]:
            continue
        if before is not None and before[3] == ":" and before[2] == colon[1]:
            continue
        params.append((colon[1], word[2], sql[word[1]:word[2]].lower()))
    return params


class _QueueBuilder(Builder):
    def queue(self, root: yaml.Node) -> QueueFile:
        top = self.mapping(root, "the queue file")
        for key, (knode, _) in top.items():
            if key not in TOP_KEYS:
                self.fail(knode, f"unknown key '{key}' (expected one of: {', '.join(sorted(TOP_KEYS))})")
        for required in REQUIRED:
            if required not in top:
                self.fail(root, f"missing '{required}' (a queue file names {', '.join(REQUIRED)}; docs/queue-format.md)")
        self.engines = self.engine_list(top["engines"][1]) if "engines" in top else ENGINE_NAMES
        parts = {
            part: self.by_engine(top[part][1], part, lambda node, what, engine, part=part: self.statements(node, what, engine, part))
            for part in PARAMS
            if part in top
        }
        work = self.work(top["work"][1]) if "work" in top else "in-claim"
        rescue_ms = float(self.int_of(top["rescue_ms"][1], "rescue_ms", 1, MAX_RESCUE_MS)) if "rescue_ms" in top else 0.0
        if "rescue" in top and "rescue_ms" not in top:
            self.fail(top["rescue"][0], "rescue needs rescue_ms: how often, in milliseconds, the rescuer runs")
        if "rescue_ms" in top and "rescue" not in top:
            self.fail(top["rescue_ms"][0], "rescue_ms without rescue: name the statements the rescuer runs")
        variants = {
            engine: QueueSql(
                **{part: by_engine.get(engine, ()) for part, by_engine in parts.items()}, rescue_ms=rescue_ms, work=work
            )
            for engine in self.engines
        }
        title = self.text_of(top["title"][1], "title").strip() if "title" in top else ""
        models = self.text_of(top["models"][1], "models").strip() if "models" in top else ""
        return QueueFile(self.path, title, models, self.engines, variants)

    def work(self, node: yaml.Node) -> str:
        value = self.text_of(node, "work")
        if value not in WORK_MODES:
            self.fail(node, f"work must be one of: {', '.join(WORK_MODES)}, got '{value}'")
        return value

    def statements(self, node: yaml.Node, what: str, engine: str, part: str) -> tuple[QueueStatement, ...]:
        """A YAML list of statements, or one block of `;`-separated ones."""
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out: list[QueueStatement] = []
        for item in items:
            text = self.text_of(item, f"{what}: each statement")
            cut = split_statements(text, engine)
            if cut is None:
                if isinstance(node, yaml.SequenceNode):
                    cut = [(0, text.strip())]
                else:
                    self.fail(item, f"{what}: cannot cut this block into statements with certainty "
                                    "(dollar quoting, an open quote): write them as a YAML list")
            out += [self.statement(item, what, engine, part, offset, sql, first=not out) for offset, sql in cut]
        if not out:
            self.fail(node, f"{what}: no statement")
        return tuple(out)

    def statement(self, item: yaml.Node, what: str, engine: str, part: str, offset: int, sql: str, first: bool):
        block = item.style in ("|", ">")
        base = item.start_mark.line + 1 + block + item.value.count("\n", 0, offset)
        if refused := refusal(sql, engine):
            raise ScenarioError(self.path, f"{what}: {refused[1]}", base + sql.count("\n", 0, refused[0]))
        if found := TOOL_NAME.search(sql):
            raise ScenarioError(self.path, f"{what}: names jqd_..., the tool's own objects (where it records each job's "
                                           "effect); name yours otherwise", base + sql.count("\n", 0, found.start()))
        words = [t for t in tokens(sql, mysql=engine == mysql.NAME) if t[0] == WORD]
        if part != "setup" and words and words[0][3] in TRANSACTION_WORDS:
            raise ScenarioError(self.path, f"{what}: {words[0][3]} is the tool's: it begins and ends each transaction "
                                           "itself (docs/queue-format.md, work)", base)
        params = find_params(sql, engine)
        if params is None:
            raise ScenarioError(self.path, f"{what}: cannot find its parameters with certainty (dollar quoting, "
                                           "an open quote)", base)
        allowed = PARAMS[part]
        for start, _, name in params:
            line = base + sql.count("\n", 0, start)
            if name not in allowed:
                took = f"takes {', '.join(':' + p for p in allowed)}" if allowed else "takes no parameter"
                raise ScenarioError(self.path, f"{what}: unknown parameter :{name} ({part} {took})", line)
            if part in ("claim", "rescue") and first and name in ("job", "jobs"):
                raise ScenarioError(self.path, f"{what}: :{name} in the {part}'s first statement: the job ids are "
                                               "known only once a statement has returned them", line)
        return QueueStatement(sql, base, tuple(params))
