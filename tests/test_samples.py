"""The committed sample reports are what sample_reports/generate.py makes, and load cleanly."""

from __future__ import annotations

import importlib.util

import popviz

from conftest import SAMPLES


def test_committed_samples_match_the_generator():
    spec = importlib.util.spec_from_file_location("generate", SAMPLES / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for directory, expected in module.samples().items():
        loaded = popviz.load(SAMPLES / directory)
        assert sorted(loaded.labels) == sorted(r.name for r in expected)
        for report in expected:
            assert loaded[report.name] == report, (directory, report.name)
