"""The catalogue of the lessons shipped with the package, in teaching order (the `lessons`
command). Apart from lessons.py, which every run uses to find a lesson by name: a run does
not define the catalogue's record."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ScenarioError
from . import lessons

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
    permutations: int | None = None  # an isolation spec's (its name is the file's, .spec and all)

    @property
    def for_explore(self) -> bool:
        return bool(self.variant_of) or self.name.endswith(EXPLORE_SUFFIX)


def catalogue() -> list[Lesson]:
    """Every shipped lesson, in teaching order. One unreadable file does not hide the others."""
    from .loader import load_scenario

    out = []
    for path in sorted((p for folder in lessons.lesson_dirs() for p in folder.glob("*.yaml")), key=_teaching_place):
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
    out += [_spec(path) for path in sorted(p for folder in lessons.lesson_dirs() for p in (folder / "specs").glob("*.spec"))]
    variants: dict[str, list[str]] = {}
    for lesson in out:
        if lesson.explore:
            variants.setdefault(lesson.explore, []).append(lesson.name)
    return [replace(lesson, variant_of=tuple(variants.get(lesson.name, ()))) for lesson in out]


def _spec(path: Path) -> Lesson:
    """A shipped isolation spec, summed up by the first sentence of its opening comment."""
    from .loader import load_scenario
    from .spec import spec_permutations

    try:
        scenario = load_scenario(str(path))
    except ScenarioError as e:
        return Lesson(path.name, str(path), "", (), None, str(e))
    comment = []
    for line in scenario.source.splitlines():
        if not line.startswith("#") or line.startswith("#@"):
            break
        comment.append(line.lstrip("#").strip())
    text = " ".join(comment)
    # A sentence ends at a full stop after a word, before a capital (not `UPDATE ... RETURNING`).
    summary = re.split(r"(?<=\w)\. (?=[A-Z])", text, maxsplit=1)[0].rstrip(".") + "." if text else scenario.title
    return Lesson(path.name, str(path), summary, scenario.session_names, None, engines=scenario.engines,
                  permutations=spec_permutations(scenario.spec))


def _teaching_place(path: Path) -> tuple:
    name = path.stem
    if name in TEACHING_ORDER:
        return (TEACHING_ORDER.index(name), "")
    return (len(TEACHING_ORDER) + name.endswith(EXPLORE_SUFFIX), name)
