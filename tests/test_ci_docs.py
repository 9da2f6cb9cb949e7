"""The CI workflow in docs/ci.md, run locally: the same popviz commands its GitHub Actions job
runs (capture with the emulator, compare with the committed baseline, --github, --junit)."""

from __future__ import annotations

import re
import shlex
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, run_cli

pytest.importorskip("torch")

DOC = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")


def workflow_commands(section: str) -> list[list[str]]:
    """The `popviz ...` commands of a YAML block in docs/ci.md's section."""
    block = DOC.split(f"## {section}", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    commands = re.findall(r"(?:- run: |- )(popviz [^\n]+)", block)
    return [shlex.split(c.split(">", 1)[0]) for c in commands]


def test_the_github_workflow_commands_work(tmp_path):
    commands = workflow_commands("GitHub Actions")
    assert [c[1] for c in commands] == ["capture", "compare"]
    capture, compare = commands
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "mnist_pipeline.py").write_text((ROOT / "examples" / "mnist_pipeline.py").read_text())
    (tmp_path / "perf").mkdir()
    capture = [sys.executable if a == "python" else a for a in capture]
    proc = run_cli(*capture[1:], "--device-iterations", "4", "--gradient-accumulation", "8", cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = capture[capture.index("-o") + 1]
    saved = run_cli("baseline", "save", run_dir, "-o", "perf/baseline.json", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    summary = tmp_path / "summary.md"
    proc = run_cli(*compare[1:], cwd=tmp_path, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary.read_text().startswith("### ✅ popviz: OK: no regression")
    suite = ET.parse(tmp_path / "popviz-junit.xml").getroot()
    assert suite.get("failures") == "0" and int(suite.get("tests")) > 20


def test_the_gitlab_job_uses_the_same_commands():
    commands = workflow_commands("GitLab CI")
    assert [c[1] for c in commands] == ["capture", "compare", "compare"]
    assert "--junit" in commands[2] and "--markdown" in commands[1]
