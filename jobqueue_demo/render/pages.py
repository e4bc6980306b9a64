"""The lesson page's formats, in one place: each one's file suffixes and its renderer."""

from __future__ import annotations

from collections.abc import Callable

from .export import LessonFacts, render_html, render_markdown
from .page_json import render_json

RENDERERS: dict[str, Callable[[LessonFacts], str]] = {"html": render_html, "md": render_markdown, "json": render_json}
PAGE_SUFFIXES = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def render_page(facts: LessonFacts, fmt: str) -> str:
    return RENDERERS[fmt](facts)
