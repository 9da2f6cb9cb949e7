"""The captured samples in sample_reports/ are what sample_reports/regenerate.py makes.

Each sample is regenerated into a temporary directory (its example script under
`popviz capture --emulate`, real subprocesses) and `popviz analyse --json` of the regenerated
and the committed directory must agree on everything but what differs by nature between two
runs: timestamps, paths, and host wall times.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import popviz

from conftest import SAMPLES, run_cli

pytest.importorskip("torch")

VOLATILE_KEYS = {"captured_at", "root", "path", "wall_seconds", "compile_seconds"}
"""Keys whose values differ between two captures of the same script (time and place)."""


def _regenerate_module():
    spec = importlib.util.spec_from_file_location("regenerate", SAMPLES / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["regenerate"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


REGEN = _regenerate_module()


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Paths at which two JSON values differ, with both values (readable assertion messages)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{where}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def _analysis(path: Path) -> dict:
    proc = run_cli("analyse", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return _stable(json.loads(proc.stdout))


@pytest.mark.parametrize("sample", [s.name for s in REGEN.SAMPLES])
def test_sample_is_committed_and_small(sample):
    directory = SAMPLES / sample
    assert directory.is_dir(), f"run python sample_reports/regenerate.py {sample}"
    size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    assert size < 2_000_000, (sample, size)
    reports = popviz.load(directory)
    assert len(reports) >= 1
    assert all(r.provenance.estimated for r in reports), "captured samples are emulator estimates"


@pytest.mark.parametrize("sample", [s.name for s in REGEN.SAMPLES])
def test_regenerating_a_sample_gives_the_same_analysis(sample, tmp_path):
    chosen = next(s for s in REGEN.SAMPLES if s.name == sample)
    reason = REGEN.available(chosen)
    if reason:
        pytest.skip(f"{sample}: {reason}")
    REGEN.regenerate([sample], tmp_path)
    assert _differences(_analysis(tmp_path / sample), _analysis(SAMPLES / sample)) == []
