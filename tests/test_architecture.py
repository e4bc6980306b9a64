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
    assert "jobqueue_demo.engine.session" in found and "jobqueue_demo.errors" in found
