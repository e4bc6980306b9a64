"""The layering docs/architecture.md describes, checked on the source: data flows one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jobqueue_demo.run.faults import INJECTORS
from jobqueue_demo.scenario.fault_kinds import BY_NAME, KINDS, STEP_FAULTS

PACKAGE = Path(__file__).resolve().parent.parent / "jobqueue_demo"
TOP = {"errors", "safe_write"}  # importable from every layer
MAY_IMPORT = {
    "engine": {"engine"},
    "scenario": {"scenario", "engine"},
    "run": {"run", "scenario", "engine"},
    "explore": {"explore", "run", "scenario", "engine"},
    "workers": {"workers", "engine"},
    "replay": {"replay", "run", "scenario", "engine"},
    "render": {"render", "run", "scenario", "engine", "explore", "workers"},
    "serve": {"serve", "render", "run", "scenario", "engine"},
}
UI_LIBRARIES = {"typer", "rich", "click"}
WEB_LIBRARIES = {"starlette", "uvicorn"}  # `serve`'s alone: no other command's start-up imports them


def package_of(path: Path) -> str:
    """The package a file's relative imports start from (an __init__.py's is its own)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1])


def from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` names, made absolute."""
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return base


def imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) for every import in the file, relative ones made absolute."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, package_of(path))
            found += [(f"{base}.{alias.name}" if not node.module else base, node.lineno) for alias in node.names]
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "jobqueue_demo" and len(parts) > 1 else None


SOURCES = sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layers(path):
    own = path.relative_to(PACKAGE).parts[0]
    allowed = MAY_IMPORT.get(own)
    for module, line in imports(path):
        target = layer(module)
        if target == "cli":
            assert own in ("cli", "__main__.py"), f"{path.name}:{line} imports the CLI ({module})"
        if allowed is not None and target is not None:
            assert target in allowed | TOP, f"{path.relative_to(PACKAGE)}:{line} imports {module}"
        if module.split(".")[0] in UI_LIBRARIES:
            assert own in ("cli", "render"), f"{path.relative_to(PACKAGE)}:{line} imports {module} outside cli/ and render/"
        if module.split(".")[0] in WEB_LIBRARIES:
            assert own == "serve", f"{path.relative_to(PACKAGE)}:{line} imports {module} outside serve/"


COMMANDS = sorted((PACKAGE / "cli").glob("*.py"))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_commands_go_through_the_api(path):
    for module, line in imports(path):
        target = layer(module)
        if target is not None:
            assert target in {"cli", "api", "render", "__version__"} | TOP, f"cli/{path.name}:{line} imports {module}, not api"


def test_the_checker_sees_relative_imports():
    found = dict(imports(PACKAGE / "run" / "driver.py"))
    assert "jobqueue_demo.engine.seam" in found and "jobqueue_demo.errors" in found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private_reaches(source: str, package: str) -> list[str]:
    """Where a module of `package` uses another of the package's modules' private names
    (`_name`): what one module needs of another is public, so a private name can change in one
    place."""
    tree = ast.parse(source)
    modules, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = from_base(node, package)
            if base.split(".")[0] != "jobqueue_demo":
                continue
            for alias in node.names:
                if _is_module(f"{base}.{alias.name}"):
                    modules.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.lineno}: from {base} import {alias.name}")
        elif isinstance(node, ast.Import):
            modules |= {alias.asname for alias in node.names if alias.asname and alias.name.startswith("jobqueue_demo.")}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reaches_into_another(path):
    package = ".".join(path.relative_to(PACKAGE.parent).parts[:-1])
    assert private_reaches(path.read_text(), package) == []


def test_the_checker_sees_a_private_reach():
    source = "from . import embedded as emb\nfrom .server import _whole_seconds\nemb._kill_group('')\n"
    assert private_reaches(source, "jobqueue_demo.engine.mysql") == [
        "2: from jobqueue_demo.engine.mysql.server import _whole_seconds",
        "3: emb._kill_group",
    ]


# Fault kinds: scenario/fault_kinds.py is the one list of them, and every layer that may import
# it reads names, words and properties from there. engine/ and workers/ may not import it: what
# of theirs is spelled like a kind means something else ("wait", a lock mode; "kill", a worker
# killed), except engine's FAULT_CALLS, whose keys are checked against the registry below.
REGISTRY = PACKAGE / "scenario" / "fault_kinds.py"
READ_THE_REGISTRY = [
    p for p in SOURCES if p != REGISTRY and p.relative_to(PACKAGE).parts[0] not in ("engine", "workers")
]
# Literals in those layers spelled as a fault kind, meaning something else.
OTHER_MEANINGS = {
    ("render/columns.py", "wait"): "a line's kind: a statement seen waiting",
    ("render/export.py", "wait"): "the CSS class of a waiting line",
}


def spelled(source: str, names) -> list[tuple[int, str]]:
    """(line, literal) for every string literal of the source that is one of `names`."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]


@pytest.mark.parametrize("path", READ_THE_REGISTRY, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_registry_spells_a_fault_kind(path):
    where = path.relative_to(PACKAGE).as_posix()
    found = [f"{where}:{line} {name!r}" for line, name in spelled(path.read_text(), BY_NAME) if (where, name) not in OTHER_MEANINGS]
    assert found == [], "read the fault kind from scenario/fault_kinds.py"


def test_the_other_meanings_are_still_there():
    for where, name in OTHER_MEANINGS:
        assert name in [n for _, n in spelled((PACKAGE / where).read_text(), BY_NAME)], where


def test_the_checker_sees_a_spelled_fault_kind():
    source = 'FAULT = "kill"\nif action == "kill-query":\n    print("killed")\n'
    assert spelled(source, BY_NAME) == [(1, "kill"), (2, "kill-query")]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_fault_kind_is_told_and_injected(kind):
    assert kind.told, "what the transcript and the columns say of it"
    if kind.written:
        assert kind.name in INJECTORS, "run/faults.py does a kind scenarios write"
    else:
        assert kind.explored and kind.sql, "a kind no scenario writes is explore's statement in a step's place"


def test_every_injector_is_of_a_kind_scenarios_write():
    assert sorted(INJECTORS) == sorted(STEP_FAULTS)


def test_every_server_call_is_of_a_registered_kind():
    """engine/ names the call each kind is done with (FAULT_CALLS) without importing the registry."""
    keys = []
    for path in (PACKAGE / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FAULT_CALLS" for t in node.targets):
                keys += [key.value for key in node.value.keys]
    assert keys and set(keys) <= set(STEP_FAULTS)


# -- engine/: one package per engine behind the typed seam ----------------------------------

ENGINE = "jobqueue_demo.engine"
# Above engine/, what run/, explore/ and workers/ may know of it: the seam and its values.
SEAM_ONLY = {"run", "explore", "workers"}
ENGINE_FACES = {ENGINE, f"{ENGINE}.seam", f"{ENGINE}.types"}
ENGINE_PACKAGES = ("mysql", "postgresql", "galera")


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path) -> list[tuple[str, int]]:
    """As imports(), but only what runs: an import under `if TYPE_CHECKING:` never executes."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    package = module_of(path) if path.name == "__init__.py" else package_of(path)
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, package)
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.append((name if _is_module(name) else base, node.lineno))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, lazy imports (inside functions) included."""
    return {
        module_of(path): {m for m, _ in runtime_imports(path) if m.startswith("jobqueue_demo") and m != module_of(path)}
        for path in SOURCES
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_import_cycle_lazy_imports_included():
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_lazy_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    lazy = "def f():\n    from .server import x\n"
    path = PACKAGE / "engine" / "mysql" / "lazy_probe.py"
    try:
        path.write_text(lazy)
        assert ("jobqueue_demo.engine.mysql.server", 2) in runtime_imports(path)
    finally:
        path.unlink()


@pytest.mark.parametrize("layer_name", sorted(SEAM_ONLY))
def test_run_explore_and_workers_see_only_the_seam_and_its_values(layer_name):
    for path in sorted((PACKAGE / layer_name).rglob("*.py")):
        for module, line in imports(path):
            if module == ENGINE or module.startswith(ENGINE + "."):
                assert module in ENGINE_FACES, f"{path.relative_to(PACKAGE)}:{line} imports {module}, not engine/seam.py or types.py"


def test_replay_sees_only_the_engines_values_and_the_lexer():
    """A report is read and its lesson built from text: of engine/, the lock words of
    types.py and the one SQL lexer; the server is reached through run/."""
    faces = ENGINE_FACES | {f"{ENGINE}.sql_lexer"}
    for path in sorted((PACKAGE / "replay").rglob("*.py")):
        for module, line in imports(path):
            if module == ENGINE or module.startswith(ENGINE + "."):
                assert module in faces, f"{path.relative_to(PACKAGE)}:{line} imports {module}"


def test_types_import_nothing_else_of_the_engine():
    for module, line in runtime_imports(PACKAGE / "engine" / "types.py"):
        assert not module.startswith(ENGINE), f"engine/types.py:{line} imports {module}"


@pytest.mark.parametrize(
    "package, never",
    [
        ("postgresql", ("mysql", "galera")),
        ("mysql", ("postgresql", "galera")),
        ("galera", ("postgresql",)),
    ],
)
def test_an_engine_package_imports_no_other_engine(package, never):
    """PostgreSQL imports nothing of MySQL; a Galera cluster is MariaDB's, and MariaDB knows no cluster."""
    for path in sorted((PACKAGE / "engine" / package).glob("*.py")):
        for module, line in imports(path):
            for other in never:
                assert not module.startswith(f"{ENGINE}.{other}"), f"engine/{package}/{path.name}:{line} imports {module}"


def test_no_engine_module_imports_the_seam():
    """The seam loads the engines; an engine that imported it back would close a circle."""
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        if path.name == "seam.py":
            continue
        for module, line in runtime_imports(path):
            assert module != f"{ENGINE}.seam", f"{path.relative_to(PACKAGE)}:{line} imports the seam"


def engines_behind_the_seam():
    from jobqueue_demo.engine.galera.engine import ENGINE as GALERA
    from jobqueue_demo.engine.seam import ENGINES

    return [entry.load() for entry in ENGINES.values()] + [GALERA]


def protocol_members(protocol) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(protocol.__annotations__)


def test_every_engine_implements_the_seam():
    from jobqueue_demo.engine.seam import Engine

    wanted = protocol_members(Engine)
    for engine in engines_behind_the_seam():
        missing = sorted(name for name in wanted if not hasattr(engine, name))
        assert missing == [], f"{type(engine).__name__} lacks {missing}"


def test_the_registry_is_the_one_list_of_engines():
    """Each registered engine is a package of its own whose engine.py gives the seam; no
    module above engine/ compares with an engine's name as a literal: it asks the seam."""
    from jobqueue_demo.engine.seam import ENGINES

    for name, entry in ENGINES.items():
        assert (PACKAGE / "engine" / name / "engine.py").is_file() and entry.load().name == name
    for path in SOURCES:
        if path.relative_to(PACKAGE).parts[0] == "engine":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                literals = [c.value for c in (node.left, *node.comparators) if isinstance(c, ast.Constant)]
                assert not set(literals) & set(ENGINES), f"{path.relative_to(PACKAGE)}:{node.lineno} compares with an engine's name"
