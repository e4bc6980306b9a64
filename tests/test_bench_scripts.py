"""Every bench script still loads: a moved or renamed module breaks it here, not months later."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = sorted((Path(__file__).resolve().parent.parent / "bench").glob("*.py"))


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_bench_script_imports(path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"
