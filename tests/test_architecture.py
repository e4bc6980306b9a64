"""The layering docs/architecture.md describes, checked on the source: data flows one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
    assert "jobqueue_demo.engine.mysql.session" in found and "jobqueue_demo.errors" in found


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
        "2: from jobqueue_demo.engine.mysql.server import _pg_server_info",
        "3: emb._summary",
    ]
