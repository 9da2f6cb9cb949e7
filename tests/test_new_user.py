"""The first hour, scripted: every command of the README (its two commands, the tour, capturing a
run), docs/getting-started.md and docs/plots.md (which runs the notebook) runs as written, in
order, in a scratch copy of the repository, and exits 0; what they write is ignored by git.

Not run here: ``pip install`` (the environment under test is this one: ``.ci/run`` makes it in a
fresh venv from a fresh clone), ``pytest`` itself, and lines whose comment says they run ``on an
IPU host``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = ("README.md", "docs/getting-started.md", "docs/plots.md")
BLOCK = re.compile(r"^```(console|bash)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def commands(doc: str) -> list[str]:
    """The commands of ``doc``'s console (``$ ...``) and bash blocks, in order, as they are run."""
    out = []
    for kind, body in BLOCK.findall((ROOT / doc).read_text(encoding="utf-8")):
        for line in body.splitlines():
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = line.strip()
            if not line or line.startswith("#") or "# on an IPU host" in line:
                continue
            parts = [p.strip() for p in line.split(" && ")]
            parts = [p for p in parts if not p.startswith("pip install") and p.split("#")[0].strip() != "pytest"]
            if parts:
                out.append(" && ".join(parts))
    return out


def test_the_docs_commands_are_found():
    readme = commands("README.md")
    assert readme[0] == "popviz analyse sample_reports/mnist_pipeline"  # the README's first command
    assert readme[1].startswith("popviz capture -o runs/mine --emulate --calls 1 -- python examples/bert_pipeline.py")
    assert "popviz compare baseline.json runs/next            # exit 1 on a regression" in readme
    assert not [c for c in readme if "/path/to" in c or "train.py" in c]  # no command that cannot run
    started = commands("docs/getting-started.md")
    assert started[1] == "popviz capture -o runs/first --emulate -- python examples/mnist_pipeline.py --steps 1"
    assert commands("docs/plots.md")[0] == "jupyter execute docs/notebooks/quickstart.ipynb"  # the notebook


def _scratch_copy(dest: Path) -> None:
    """The repository's files as a fresh clone has them (plus files not yet committed)."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
        for name in filter(None, listed):
            src = ROOT / name
            if src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:
        shutil.copytree(ROOT, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".ci-venv", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis", "runs",
            "figures", "bundles", "report.html", "baseline.json"))


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow  # a few minutes: three emulated captures, the notebook and a dozen analyses
@pytest.mark.timeout(1800)
def test_a_new_user_runs_every_documented_command(tmp_path):
    work = tmp_path / "popviz"
    work.mkdir()
    _scratch_copy(work)
    has_git = shutil.which("git") is not None
    if has_git:  # to see, at the end, that everything the commands wrote is ignored by git
        _git(work, "init", "-q")
        _git(work, "add", "-A")
        _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "clone")
    bin_dir = str(Path(sys.executable).parent)  # popviz, python and jupyter of the environment under test
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "MPLBACKEND": "Agg",
           "COLUMNS": "100", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    ran = []
    for doc in DOCS:
        for command in commands(doc):
            proc = subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=900)
            assert proc.returncode == 0, (doc, command, proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
            ran.append(command)
    assert len(ran) >= 20
    assert (work / "runs" / "mine" / "training" / "popviz-report.json").is_file()
    assert (work / "report.html").is_file() and (work / "baseline.json").is_file()
    assert (work / "bundles" / "training" / "popviz-report.json").is_file()
    if has_git:
        assert _git(work, "status", "--porcelain", "--untracked-files=all") == ""
