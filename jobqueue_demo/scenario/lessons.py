"""Finding a scenario by path, or by the name of a lesson shipped with the package."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ScenarioError


def lesson_dirs() -> list[Path]:
    """Where lessons are looked up: the installed package data, else a checkout's scenarios/.

    Never both: next to an installed package, `../scenarios` is a folder of site-packages
    that may belong to another distribution.
    """
    here = Path(__file__).resolve().parent.parent
    installed = here / "lessons"
    return [installed] if installed.is_dir() else [here.parent / "scenarios"]


def resolve(name: str) -> str:
    if os.path.exists(name) or os.sep in name or name.endswith((".yaml", ".yml")):
        return name
    if name.endswith(".spec"):  # not here: one of the isolation specs shipped with the lessons
        shipped = [folder / "specs" / name for folder in lesson_dirs()]
        return str(next((p for p in shipped if p.is_file()), name))
    for folder in lesson_dirs():
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            return str(candidate)
    from .nearest import nearest

    guess = nearest(name, (p.stem for folder in lesson_dirs() for p in folder.glob("*.yaml")))
    hint = f"did you mean '{guess}'?" if guess else "see 'jobqueue-demo lessons'"
    raise ScenarioError(name, f"no such file, and no lesson of that name ({hint})")
