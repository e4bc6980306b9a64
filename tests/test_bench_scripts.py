"""Every bench script still loads: a moved or renamed module breaks it here, not months later."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import local_pg_reachable

BENCH = sorted((Path(__file__).resolve().parent.parent / "bench").glob("*.py"))


def _loaded(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_bench_script_imports(path):
    assert callable(getattr(_loaded(path), "main", None)), f"{path.name} has no main()"


@pytest.mark.server
def test_the_spec_bench_runs_both_tools_on_the_same_permutations():
    """--quick: isolationtester and explore on the 20-permutation spec; the bench refuses
    (exit 1) when either runs another number of permutations than the spec has."""
    path = next(p for p in BENCH if p.name == "bench_spec_vs_isolationtester.py")
    if _loaded(path).find_isolationtester() is None or not local_pg_reachable():
        pytest.skip("needs PostgreSQL's isolationtester and the PostgreSQL on 127.0.0.1:5432")
    done = subprocess.run([sys.executable, str(path), "--quick"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "skip-locked-pair.spec: 20 permutations" in done.stdout
    assert "ratio explore" in done.stdout and "steady state" in done.stdout
