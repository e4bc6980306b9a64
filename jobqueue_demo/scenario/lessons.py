"""Finding a scenario by path, or by the name of a lesson shipped with the package."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
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
    for folder in lesson_dirs():
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            return str(candidate)
    raise ScenarioError(name, "no such file, and no lesson of that name (see 'jobqueue-demo lessons')")


# The order docs/lessons.md teaches them in (a test keeps the two alike); lessons not named
# here follow, by name.
TEACHING_ORDER = (
    "skip-locked", "for-update-waits", "nowait", "metadata-lock", "stalled-worker", "disconnect-worker",
    "kill-worker", "starvation", "index-locks", "filesort-locks",
    "deadlock", "gap-locks", "supremum-wait", "same-transaction",
    "outbox",
    "cluster-skip-locked", "cluster-claim-one-node", "cluster-claim-update", "cluster-idempotency",
    "cluster-stale-read",
)

# Scenarios written for `explore` (captures, invariants) rather than to be read as a transcript.
EXPLORE_SUFFIX = "-explore"


@dataclass(frozen=True)
class Lesson:
    name: str
    path: str
    summary: str
    sessions: tuple[str, ...]
    verified: str | None  # every engine's stamp, or None
    problem: str | None = None  # why the file cannot be loaded; the other fields are then empty
    explore: str | None = None  # its explore variant
    variant_of: tuple[str, ...] = ()  # the lessons this one is the explore variant of
    engines: tuple[str, ...] = ()

    @property
    def for_explore(self) -> bool:
        return bool(self.variant_of) or self.name.endswith(EXPLORE_SUFFIX)


def catalogue() -> list[Lesson]:
    """Every shipped lesson, in teaching order. One unreadable file does not hide the others."""
    from .loader import load_scenario

    out = []
    for path in sorted((p for folder in lesson_dirs() for p in folder.glob("*.yaml")), key=_teaching_place):
        try:
            scenario = load_scenario(str(path))
        except ScenarioError as e:
            out.append(Lesson(path.stem, str(path), "", (), None, str(e)))
            continue
        summary = scenario.summary or scenario.title
        stamps = scenario.verified_text if scenario.stamps else None
        out.append(Lesson(
            path.stem, str(path), summary, scenario.session_names, stamps, explore=scenario.explore,
            engines=scenario.engines,
        ))
    variants: dict[str, list[str]] = {}
    for lesson in out:
        if lesson.explore:
            variants.setdefault(lesson.explore, []).append(lesson.name)
    return [replace(lesson, variant_of=tuple(variants.get(lesson.name, ()))) for lesson in out]


def _teaching_place(path: Path) -> tuple:
    name = path.stem
    if name in TEACHING_ORDER:
        return (TEACHING_ORDER.index(name), "")
    return (len(TEACHING_ORDER) + name.endswith(EXPLORE_SUFFIX), name)
