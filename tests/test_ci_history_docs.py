"""docs/ci-history.md's CI jobs, run locally: the GitLab script as written (two pipelines: the
first starts the history, the second compares with it), and the GitHub workflow runs the same
popviz commands; and the PostgreSQL workflow's steps in order against a real server, as two jobs
of one commit at once and then a pull request's job. One emulated capture of
examples/mnist_pipeline.py per test."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from popviz.ci import history

from conftest import ROOT, unwrapped

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
    [block] = [b for b in yaml_blocks() if "runs-on:" in b and "services:" not in b]
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


# ------------------------------------------------------------ the PostgreSQL workflow, step by step

def postgres_workflow() -> tuple[dict[str, str], list[dict[str, str]]]:
    """The job's env and its steps (``run`` with its ``if``, ``uses``) as the page writes them."""
    [block] = [b for b in yaml_blocks() if "services:" in b]
    env = dict(re.findall(r"^      (\w+): (.+)$", block.split("\n    env:\n", 1)[1].split("\n    steps:", 1)[0],
                          flags=re.M))
    steps: list[dict[str, str]] = []
    lines = block.split("\n    steps:\n", 1)[1].splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("      - "):
            steps.append({})
            line = "        " + line[len("      - "):]
        m = re.match(r"^        (\w[\w-]*): ?(.*)$", line)
        if m and steps:
            key, value = m.groups()
            if key == "run" and value == "|":
                body = []
                while k + 1 < len(lines) and lines[k + 1].startswith("          "):
                    k += 1
                    body.append(lines[k][len("          "):])
                value = "\n".join(body)
            steps[-1][key] = value
        k += 1
    return env, steps


def test_the_postgres_workflow_step_by_step(tmp_path):
    """The workflow's steps as a new user runs them by hand, the team's server (the secret) being
    a real local PostgreSQL with a password role: two jobs of the main branch at once (both runs
    land), then a pull request's job (compared with them: OK)."""
    import threading

    import pg_server

    pg_server.require()
    fixture = pg_server._server_fixture()
    base, _ = next(fixture)
    try:
        _postgres_workflow(tmp_path, base, threading)
    finally:
        next(fixture, None)


def _postgres_workflow(tmp_path: Path, base: str, threading) -> None:
    import pg_server

    env_block, steps = postgres_workflow()
    assert env_block["POPVIZ_HISTORY"].startswith("${{ secrets.POPVIZ_HISTORY_URL || 'postgresql://")
    assert [s.get("uses", "").split("@")[0] for s in steps if "uses" in s] == [
        "actions/checkout", "actions/setup-python", "actions/upload-artifact"]
    runs = [s for s in steps if "run" in s]
    assert runs[0]["run"] == "pip install torch==2.13.0 'popviz[emulate,postgres]'"  # the environment's business
    user, password = pg_server.PASSWORD_USER
    name = "popviz_workflow"
    pg_server.create_database(base, name)
    pg_server.Server.sql_url(pg_server.url_of(base, name), f"GRANT ALL ON DATABASE {name} TO {user}")
    import psycopg

    with psycopg.connect(base, autocommit=True) as con:
        port = con.execute("SHOW port").fetchone()[0]
    url = f"postgresql://{user}@127.0.0.1:{port}/{name}"  # what POPVIZ_HISTORY_URL would hold
    reader = f"postgresql://{user}:{password}@127.0.0.1:{port}/{name}"  # this test's own reads
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    common = {**clean, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
              "OMP_NUM_THREADS": "1", "COLUMNS": "100", "POPVIZ_HISTORY": url, "PGPASSWORD": password,
              "HOME": str(tmp_path)}

    def job(name: str, sha: str, main: bool) -> tuple[Path, list[subprocess.CompletedProcess[str]]]:
        work = tmp_path / name
        summary = work / "summary.md"
        env = {**common, "GITHUB_STEP_SUMMARY": str(summary)}
        out = []
        for step in runs[2:]:  # after the install and the capture (done once, below)
            if step.get("if") == "github.ref == 'refs/heads/main'" and not main:
                continue
            command = step["run"].replace("${{ github.sha }}", sha)
            out.append(subprocess.run(["bash", "-ec", command], cwd=work, env=env, capture_output=True, text=True,
                                      timeout=300))
        return work, out

    first = tmp_path / "main-a"
    (first / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "mnist_pipeline.py", first / "examples")
    capture = subprocess.run(["bash", "-ec", runs[1]["run"]], cwd=first, env=common, capture_output=True, text=True,
                             timeout=600)
    assert capture.returncode == 0, capture.stderr[-2000:]
    for other in ("main-b", "pr"):
        shutil.copytree(first, tmp_path / other)  # the same commit captures the same (deterministic) figures
    results: dict[str, tuple[Path, list]] = {}
    threads = [threading.Thread(target=lambda n=n, s=s: results.__setitem__(n, job(n, s, True)))
               for n, s in (("main-a", "c0ffee1"), ("main-b", "c0ffee2"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for n in ("main-a", "main-b"):
        work, procs = results[n]
        assert [p.returncode for p in procs] == [0, 0, 0], [p.stdout[-800:] + p.stderr[-800:] for p in procs]
        compared, added, _shown = procs
        assert (compared.stdout.startswith("the history has no runs yet: nothing to compare with")
                or compared.stdout.startswith("popviz: OK: no regression")), compared.stdout
        assert re.fullmatch(rf"popviz: added run #\d \(c0ffee\d\) to {re.escape(url)}: 2 engine\(s\), 44 "
                            r"metric\(s\)\n", unwrapped(added.stderr)), added.stderr  # broken at 100 columns
        assert password not in "".join(p.stdout + p.stderr for p in procs)
        assert (work / "summary.md").read_text().startswith("### popviz history: ")
        page = (work / "popviz-history.html").read_text()
        assert page.count("<svg") >= 2 and "<script" not in page
    h = history.read(reader)
    assert sorted(r.label for r in h.runs) == ["c0ffee1", "c0ffee2"]  # both jobs' runs landed
    pr_work, pr = job("pr", "beef003", main=False)
    assert [p.returncode for p in pr] == [0], [p.stdout[-1500:] + p.stderr[-1500:] for p in pr]
    assert pr[0].stdout.startswith("popviz: OK: no regression")
    assert pr[0].stdout.splitlines()[1].startswith(f"base: the median of the last 2 run(s) in {url} (#")
    assert 'failures="0"' in (pr_work / "popviz-junit.xml").read_text()
    assert [r.label for r in history.read(reader).runs] == [r.label for r in h.runs]  # a PR adds nothing
    # a server the job cannot reach fails the compare step with popviz's line (not "nothing to compare")
    broken = subprocess.run(["bash", "-ec", runs[2]["run"]], cwd=pr_work,
                            env={**common, "POPVIZ_HISTORY": f"postgresql://{user}@127.0.0.1:1/{name}"},
                            capture_output=True, text=True, timeout=120)
    assert broken.returncode == 2 and "cannot connect" in broken.stderr, broken.stderr
