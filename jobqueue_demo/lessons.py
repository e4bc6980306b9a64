"""Finding a scenario by path, or by the name of a lesson shipped with the package."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ScenarioError


def lesson_dirs() -> list[Path]:
    """Where lessons are looked up: the installed package data, else a checkout's scenarios/.

    Never both: next to an installed package, `../scenarios` is a folder of site-packages
    that may belong to another distribution.
    """
    here = Path(__file__).resolve().parent
    installed = here / "lessons"
    return [installed] if installed.is_dir() else [here.parent / "scenarios"]


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
    problem: str | None = None  # why the file cannot be loaded; the other fields are then empty


def catalogue() -> list[Lesson]:
    """Every shipped lesson, by name. One unreadable file does not hide the others."""
    from .loader import load_scenario

    out = []
    for path in sorted(p for folder in lesson_dirs() for p in folder.glob("*.yaml")):
        try:
            scenario = load_scenario(str(path))
        except ScenarioError as e:
            out.append(Lesson(path.stem, str(path), "", (), None, str(e)))
            continue
        out.append(Lesson(path.stem, str(path), scenario.summary or scenario.title, scenario.session_names, scenario.verified))
    return out
