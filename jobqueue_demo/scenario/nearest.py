"""The nearest known name to a misspelt one, for error messages that name the likely fix."""

from __future__ import annotations


def nearest(word: str, choices) -> str | None:
    """The closest of `choices` to `word`, ignoring case, as it is spelt among the choices."""
    import difflib

    spelt = {choice.lower(): choice for choice in choices}
    found = difflib.get_close_matches(word.lower(), list(spelt), n=1, cutoff=0.6)
    return spelt[found[0]] if found else None
