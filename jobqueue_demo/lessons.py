"""Finding a scenario by path, or by the name of a lesson shipped with the package."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ScenarioError


def lesson_dirs() -> list[Path]:
    here = Path(__file__).resolve().parent
    return [here / "lessons", here.parent / "scenarios"]


def resolve(name: str) -> str:
    if os.path.exists(name) or os.sep in name or name.endswith((".yaml", ".yml")):
        return name
    for folder in lesson_dirs():
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            return str(candidate)
    raise ScenarioError(name, "no such file, and no lesson of that name (see 'jobqueue-demo lessons')")


@dataclass(frozen=True)
class Lesson:
    name: str
    path: str
    summary: str
    sessions: tuple[str, ...]
    verified: str | None


def catalogue() -> list[Lesson]:
    """Every shipped lesson, by name; the installed copy wins over a source checkout's."""
    from .loader import load_scenario

    found: dict[str, Path] = {}
    for folder in reversed(lesson_dirs()):
        for path in sorted(folder.glob("*.yaml")):
            found[path.stem] = path
    out = []
    for name, path in sorted(found.items()):
        scenario = load_scenario(str(path))
        out.append(Lesson(name, str(path), scenario.summary or scenario.title, scenario.session_names, scenario.verified))
    return out
