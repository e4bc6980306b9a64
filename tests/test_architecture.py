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
    "render": {"render", "run", "scenario", "engine", "explore", "workers"},
}
UI_LIBRARIES = {"typer", "rich", "click"}


def imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) for every import in the file, relative ones made absolute."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
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


COMMANDS = sorted((PACKAGE / "cli").glob("*.py"))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_commands_go_through_the_api(path):
    for module, line in imports(path):
        target = layer(module)
        if target is not None:
            assert target in {"cli", "api", "render", "__version__"} | TOP, f"cli/{path.name}:{line} imports {module}, not api"


def test_the_checker_sees_relative_imports():
    found = dict(imports(PACKAGE / "run" / "driver.py"))
    assert "jobqueue_demo.engine.session" in found and "jobqueue_demo.errors" in found


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
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
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
    source = "from . import embedded as emb\nfrom .server import _pg_server_info\nemb._summary('')\n"
    assert private_reaches(source, "jobqueue_demo.engine") == [
        "2: from jobqueue_demo.engine.server import _pg_server_info",
        "3: emb._summary",
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
