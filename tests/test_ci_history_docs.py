"""docs/ci-history.md's CI jobs, run locally: the GitLab script as written (two pipelines: the
first starts the history, the second compares with it), and the GitHub workflow runs the same
popviz commands. One emulated capture of examples/mnist_pipeline.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytest.importorskip("torch")

DOC = (ROOT / "docs" / "ci-history.md").read_text()


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC, flags=re.S)


def gitlab_script() -> list[str]:
    [block] = [b for b in yaml_blocks() if "script:" in b]
    lines = block.split("script:\n", 1)[1].splitlines()
    out = []
    for line in lines:
        if not line.startswith("    - "):
            break
        out.append(line[len("    - "):])
    return out


def github_runs() -> list[str]:
    [block] = [b for b in yaml_blocks() if "runs-on:" in b]
    return [m.strip() for m in re.findall(r"\brun: (.+)", block)]


def popviz_commands(lines: list[str]) -> list[str]:
    """Each popviz command in the lines, CI variables and CI-only options taken out."""
    out = []
    for line in lines:
        for cmd in re.findall(r"popviz [^;&>]+", line):
            cmd = re.sub(r'"(\$\{\{ github\.sha \}\}|\$CI_COMMIT_SHORT_SHA)"', "LABEL", cmd)
            cmd = re.sub(r" --(github|markdown)\b", "", cmd).strip()
            out.append(cmd)
    return out


def test_github_and_gitlab_run_the_same_popviz_commands():
    assert popviz_commands(github_runs()) == popviz_commands(gitlab_script())
    assert len(popviz_commands(gitlab_script())) == 4


def run_script(lines: list[str], cwd: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    out = []
    for line in lines:
        proc = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        out.append(proc)
    return out


def test_the_gitlab_job_twice(tmp_path):
    script = gitlab_script()
    assert script[0].startswith("pip install")  # installing is the environment's business here
    work = tmp_path / "repo"
    (work / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "mnist_pipeline.py", work / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "COLUMNS": "100", "CI_DEFAULT_BRANCH": "main", "CI_COMMIT_BRANCH": "main",
           "CI_COMMIT_SHORT_SHA": "c0ffee1"}
    first = run_script(script[1:], work, env)
    assert [p.returncode for p in first] == [0, 0, 0, 0], [p.stderr[-1500:] for p in first]
    assert not (work / "popviz-junit.xml").exists()  # no history yet: nothing to compare with
    assert first[2].stderr == "popviz: added run #1 (c0ffee1) to perf/history.db: 2 engine(s), 44 metric(s)\n"
    assert first[3].stdout.startswith("popviz history: 1 run(s), #1 (c0ffee1) to #1 (c0ffee1); 0 step change(s)")

    # The second pipeline: a fresh checkout would capture the same model again; IPU figures (and the
    # emulator's) are deterministic, so the capture of the first pipeline stands in for it.
    second = run_script(script[2:], work, {**env, "CI_COMMIT_SHORT_SHA": "beef002"})
    assert [p.returncode for p in second] == [0, 0, 0], [p.stdout[-1500:] + p.stderr[-1500:] for p in second]
    assert second[0].stdout.startswith("popviz: OK: no regression")
    junit = (work / "popviz-junit.xml").read_text()
    assert 'failures="0"' in junit and 'name="pipeline.imbalance_ratio"' in junit
    assert second[2].stdout.startswith("popviz history: 2 run(s), #1 (c0ffee1) to #2 (beef002); 0 step change(s)")
    shown = subprocess.run([sys.executable, "-m", "popviz", "history", "show", "--db", "perf/history.db", "--json",
                            "pipeline.imbalance_ratio"], cwd=work, env=env, capture_output=True, text=True)
    doc = json.loads(shown.stdout)
    assert [r["label"] for r in doc["runs"]] == ["c0ffee1", "beef002"]
    assert {m["engine"] for m in doc["metrics"]} == {"training", "inference"}
    for m in doc["metrics"]:
        a, b = (v["value"] for v in m["values"])
        assert a == b and m["steps"] == []
