"""The cases of issue 23 through the real CLI: hostile and impossible CI files (baselines,
histories, budgets, thresholds, configuration, plan files), FIFOs and devices where a file is
expected, output targets that cannot be written, planted run records, names that carry terminal
escapes or workflow commands.

Every case runs in one real process (popviz.cli.main, as tests/test_hostile_input.py does) with
an alarm: a case that waits on a FIFO fails as a hang instead of blocking the suite. Whatever
the case: exit 0, 1 or 2 (never 3), no traceback, one line on stderr for exit 2, no escape
sequence on stdout or stderr, no workflow command popviz did not mean, and the input files
byte-identical afterwards.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile_input import snapshot

from popviz import testing
from popviz.ci.baseline import document, from_reports
from popviz.sources.bundle import write_bundle

from conftest import unwrapped

DRIVER = r"""
import contextlib, io, json, os, signal, sys
from popviz.cli import main

class Hang(Exception):
    pass

def alarm(signum, frame):
    raise Hang()

signal.signal(signal.SIGALRM, alarm)
out = {}
for name, argv, env, cwd in json.loads(sys.stdin.read()):
    saved = dict(os.environ)
    os.environ.update(env)
    here = os.getcwd()
    os.chdir(cwd)
    o, e = io.StringIO(), io.StringIO()
    signal.alarm(120)  # a hang guard (a FIFO read), not a speed limit: generous under load
    try:
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code
    except Hang:
        code = "hang"
    finally:
        signal.alarm(0)
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    out[name] = [code, o.getvalue(), e.getvalue()]
print(json.dumps(out))
"""


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def baseline_doc(root: Path) -> dict:
    return json.loads((root / "base.json").read_text())


def write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def mutate(doc: dict, fn) -> dict:
    doc = json.loads(json.dumps(doc))
    fn(doc["engines"][0])
    return doc


def history_db(path: Path, rep: Path, *, journal: str = "WAL") -> Path:
    from popviz.ci import history

    engines = from_reports(rep)
    history.add(path, engines, label="a")
    history.add(path, engines, label="b")
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA journal_mode = {journal}")
    con.close()
    return path


class Cases:
    """name -> (argv, env, cwd, allowed exit codes, needles in the one error line)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs: dict[str, tuple[list[str], dict[str, str], str, set, tuple[str, ...]]] = {}

    def add(self, name: str, *argv: str, codes=(2,), needles: tuple[str, ...] = (), env=None, cwd=None) -> None:
        self.jobs[name] = ([str(a) for a in argv], env or {}, str(cwd or self.root / "cwd"), set(codes), needles)


def build(root: Path) -> Cases:
    c = Cases(root)
    (root / "cwd").mkdir()
    rep = write_bundle(testing.pipeline_report([1000, 3000, 2000], name="train", tiles_per_ipu=8,
                                               gradient_accumulation=8), root / "rep" / "train")
    slow = write_bundle(testing.pipeline_report([1000, 6000, 2000], name="train", tiles_per_ipu=8,
                                                gradient_accumulation=8), root / "slow" / "train")
    doc = document(from_reports(rep.parent), "rep")
    write_json(root / "base.json", doc)

    # --- FIFOs and devices where a file is expected: refused, never waited on or read
    for name in ("popviz-report.json", "popviz-model.json", "profile.pop"):
        d = root / f"fifo-{name}" / "eng"
        fifo(d / name)
        c.add(f"fifo {name}", "analyse", d.parent)
    d = root / "fifo-model-beside-bundle" / "train"
    write_bundle(testing.pipeline_report([1000, 2000], name="train"), d)
    fifo(d / "popviz-model.json")
    c.add("fifo popviz-model.json beside a bundle", "analyse", d.parent, needles=("FIFO",))
    d = root / "fifo-run"
    write_bundle(testing.pipeline_report([1000, 2000], name="train"), d / "train")
    fifo(d / "popviz-run.json")
    c.add("fifo popviz-run.json", "analyse", d, codes=(0,))
    c.add("fifo baseline", "compare", fifo(root / "fifo-base.json"), rep.parent)
    c.add("fifo budget", "check", rep.parent, "--budget", fifo(root / "fifo-budget.toml"), needles=("FIFO",))
    c.add("fifo config", "compare", root / "base.json", rep.parent, "--config", fifo(root / "fifo.toml"))
    c.add("fifo history", "history", "show", "--db", fifo(root / "fifo.db"), needles=("FIFO",))
    c.add("fifo history add", "history", "add", rep.parent, "--db", root / "fifo.db", needles=("FIFO",))
    c.add("fifo step summary", "compare", root / "base.json", rep.parent, "--summary",
          env={"GITHUB_STEP_SUMMARY": str(fifo(root / "summary-fifo"))}, needles=("GITHUB_STEP_SUMMARY",))
    d = root / "devzero" / "eng"
    d.mkdir(parents=True)
    (d / "popviz-model.json").symlink_to("/dev/zero")
    c.add("/dev/zero as popviz-model.json", "analyse", d.parent, needles=("device",))
    (root / "zero.json").symlink_to("/dev/zero")
    c.add("/dev/zero as a baseline", "compare", root / "zero.json", rep.parent)

    # --- baselines that cannot be true: one line naming the field
    e0 = doc["engines"][0]
    metric = "pipeline.cycles_per_micro_batch"
    bad = {
        "findings not a list": (lambda e: e.update(findings="x"), "findings"),
        "finding severity unknown": (lambda e: e.update(findings=[{"code": "PIPE001", "severity": "fatal",
                                                                  "title": "t"}]), "severity"),
        "finding code a dict": (lambda e: e.update(findings=[{"code": {}, "severity": "error", "title": "t"}]),
                                "code"),
        "400-digit value": (lambda e: e["metrics"].update({metric: 10**400}), metric),
        "negative bytes": (lambda e: e["metrics"].update({"memory.ipu0.used_bytes": -5e9}), "impossible"),
        "share of 5000%": (lambda e: e["metrics"].update({"pipeline.utilisation_pct": 5000}), "impossible"),
        "stages: 5": (lambda e: e["config"].update(stages=5), "stages"),
        "a dict where a name was": (lambda e: e.update(name={"a": 1}), "engine"),
        "instance a list": (lambda e: e.update(instance=[1]), "instance"),
        "metric name markup": (lambda e: e["metrics"].update({"[/x]": 1}), "metric name"),
        "estimated a string": (lambda e: e.update(provenance={"source": "b", "estimated": "yes"}), "provenance"),
    }
    for name, (fn, needle) in bad.items():
        c.add(f"baseline {name}", "compare", write_json(root / f"b-{len(c.jobs)}.json", mutate(doc, fn)),
              rep.parent, needles=("b-", needle))
    text = json.dumps(doc).replace(str(e0["metrics"][metric]), "NaN", 1)
    c.add("baseline NaN", "compare", write_json(root / "b-nan.json", text), rep.parent, needles=("not finite",))
    text = json.dumps(doc).replace(str(e0["metrics"][metric]), "1e999", 1)
    c.add("baseline 1e999", "compare", write_json(root / "b-inf.json", text), rep.parent, needles=("not finite",))
    text = json.dumps(doc).replace('"train"', '"\\ud800"', 1)
    c.add("baseline lone surrogate", "compare", write_json(root / "b-sur.json", text), rep.parent,
          needles=("surrogate",))
    deep = '{"format": "popviz-baseline", "format_version": 1, "engines": ' + "[" * 200_000 + "]" * 200_000 + "}"
    c.add("baseline nested 200,000 deep", "compare", write_json(root / "b-deep.json", deep), rep.parent,
          needles=("deeply",))

    # --- thresholds, budgets and configuration: a gate that cannot fail is an error
    c.add("threshold of 400 nines", "compare", rep.parent, slow.parent, "--fail", f"{metric}:{'9' * 400}%",
          needles=("too large",))
    c.add("a real regression fails", "compare", rep.parent, slow.parent, codes=(1,))
    c.add("--fail matching nothing", "compare", rep.parent, slow.parent, "--fail", "memory.nothing:5%",
          needles=("matches no metric",))
    write_json(root / "budget-none.toml", '"memory.nothing.*" = "<= 85"\n')
    c.add("budget matching nothing", "check", rep.parent, "--budget", root / "budget-none.toml",
          needles=("matches no metric",))
    write_json(root / "budget-never.toml", '"pipeline.utilisation_pct" = "<= 100"\n')
    c.add("budget that cannot fail", "check", rep.parent, "--budget", root / "budget-never.toml",
          needles=("cannot fail",))
    write_json(root / "budget-huge.toml", f'"memory.*" = "<= {"9" * 400}"\n')
    c.add("budget of 400 nines", "check", rep.parent, "--budget", root / "budget-huge.toml")
    other = root / "other" / "eval"
    write_bundle(testing.pipeline_report([1000, 2000], name="eval"), other)
    c.add("no engine on both sides", "compare", rep.parent, other.parent, needles=("nothing was compared",))
    for name, content in (("tool = 1", b"tool = 1\n"), ("not UTF-8", b"[tool.popviz]\nx = '\xff\xfe'\n"),
                          ("nested TOML", b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n"),
                          ("popviz = 1", b"[tool]\npopviz = 1\n")):
            d = root / f"cwd-{len(c.jobs)}"
            d.mkdir()
            (d / "pyproject.toml").write_bytes(content)
            c.add(f"pyproject {name}", "compare", root / "base.json", rep.parent, cwd=d, codes=(0, 2))
    c.add("compare --json strict", "compare", "--json", rep.parent, slow.parent, codes=(1,))

    # --- histories: refused files untouched; read-only files read
    history_db(root / "h.db", rep.parent, journal="DELETE")
    c.add("history show of a rollback-journal history", "history", "show", "--db", root / "h.db", codes=(0,))
    c.add("compare against a rollback-journal history", "compare", "--against-history", root / "h.db",
          rep.parent, codes=(0,))
    con = sqlite3.connect(root / "other.db")
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    c.add("history add to a database that is not a history", "history", "add", rep.parent, "--db",
          root / "other.db", needles=("not a popviz history",))
    neg = history_db(root / "neg.db", rep.parent, journal="DELETE")
    con = sqlite3.connect(neg)
    con.execute("UPDATE metrics SET value = -5e9 WHERE metric = 'memory.ipu0.used_bytes'")
    con.commit()
    con.close()
    c.add("history with negative bytes", "history", "show", "--db", neg, needles=("impossible",))
    c.add("history add with a control-character label", "history", "add", rep.parent, "--db", root / "lab.db",
          "--label", "\x1b]0;pwned\x07", codes=(0,))
    (root / "not-sqlite.db").write_bytes(b"hello world, not sqlite")
    c.add("history add to a text file", "history", "add", rep.parent, "--db", root / "not-sqlite.db")

    # --- output targets: checked before any work, nothing partial left behind
    (root / "dangling").symlink_to(root / "nowhere" / "x")
    c.add("plot -o a dangling link", "plot", rep.parent, "-o", root / "dangling", needles=("dangling",))
    c.add("plot -o a file", "plot", rep.parent, "-o", root / "base.json", needles=("not a directory",))
    c.add("baseline save -o in a missing directory", "baseline", "save", rep.parent, "-o",
          root / "missing" / "b.json", needles=("missing does not exist; create it first",))
    c.add("baseline save -o a dangling link", "baseline", "save", rep.parent, "-o", root / "dangling",
          needles=("exists",))
    c.add("baseline save --force over a dangling link", "baseline", "save", rep.parent, "-o", root / "dangling",
          "--force", needles=("symbolic link",))
    c.add("--junit a dangling link", "compare", root / "base.json", rep.parent, "--junit", root / "dangling",
          needles=("exists",))
    c.add("--html in a missing directory", "analyse", rep.parent, "--html", root / "missing" / "r.html",
          needles=("missing does not exist; create it first",))
    c.add("step summary a directory", "compare", root / "base.json", rep.parent, "--github",
          env={"GITHUB_STEP_SUMMARY": str(root)}, needles=("GITHUB_STEP_SUMMARY",))
    c.add("step summary a dangling link", "compare", root / "base.json", rep.parent, "--summary",
          env={"GITHUB_STEP_SUMMARY": str(root / "dangling")}, needles=("dangling",))
    c.add("capture -o a dangling link", "capture", "-o", root / "dangling", "--", sys.executable, "-c", "0",
          codes=(2,))

    # --- names from files through the terminal and GitHub channels
    hostile = "x\x1b]52;c;cm0gLXJmIH4=\x07\n::warning::forged [link=https://e.x]y[/link] [/z]"
    for side in ("base", "new"):
        write_bundle(testing.pipeline_report([1000, 3000 if side == "base" else 6000, 2000], name=hostile,
                                             tiles_per_ipu=8, gradient_accumulation=8), root / f"h-{side}" / "e")
    c.add("hostile names through compare --github", "compare", root / "h-base", root / "h-new", "--github",
          env={"GITHUB_STEP_SUMMARY": str(root / "summary.md")}, codes=(1,))
    c.add("hostile names through check", "check", root / "h-new", "--fail-on", "info", codes=(0, 1))
    c.add("hostile names through analyse --markdown", "analyse", "--markdown", root / "h-new", codes=(0,))
    c.add("hostile names through analyse", "analyse", root / "h-new", codes=(0,))
    for k in range(2):
        c.add(f"hostile names through history add {k}", "history", "add", root / ("h-base", "h-new")[k], "--db",
              root / "hh.db", "--label", f"\x1b]0;t\x07[/x]<b>{k}", codes=(0,))
    c.add("hostile names through history show", "history", "show", "--db", root / "hh.db", codes=(0,))
    c.add("hostile names through history show --markdown", "history", "show", "--db", root / "hh.db",
          "--markdown", codes=(0,))
    c.add("an error quoting a hostile path", "analyse", root / "\x1b]0;title\x07[/x]", needles=("no such",))

    c.add("hostile names through analyse --html", "analyse", root / "h-new", "--html", root / "page.html",
          codes=(0,))
    c.add("hostile names through plot", "plot", root / "h-new", "-o", root / "plots", "--only", "stages,memory",
          codes=(0,))
    for label, cycles in (("all-zero", 0), ("2^62-cycle", 2**62), ("2^40-cycle", 2**40)):
        layers = testing.layer_table([1000] * 6, names=["emb", "l0", "l1", "l2", "l3", "head"],
                                     roles=["embeddings", "layer", "layer", "layer", "layer", "head"],
                                     pins=["first", None, None, None, None, "last"], layers_per_ipu=[2, 2],
                                     weight_bytes=1000)
        d = write_bundle(testing.layered_report(layers, name="t", tiles_per_ipu=1, gradient_accumulation=16),
                         root / f"plan-{label}")
        meta = json.loads((d / "popviz-report.json").read_text())
        for layer in meta["layers"]["layers"]:
            layer["fwd_cycles"], layer["bwd_cycles"] = cycles, 2 * cycles
        (d / "popviz-report.json").write_text(json.dumps(meta))
        c.add(f"plan with {label} layer costs", "plan", d, codes=(0, 1, 2))

    # --- sizes no system has; many engines
    big = testing.pipeline_report([1000, 2000], name="big", tiles_per_ipu=8)
    d = write_bundle(big, root / "tiles" / "big")
    meta = json.loads((d / "popviz-report.json").read_text())
    meta["target"]["tiles_per_ipu"] = 2**40
    (d / "popviz-report.json").write_text(json.dumps(meta))
    c.add("tiles_per_ipu 2^40 through plot", "plot", d, "-o", root / "plots-big", needles=("tiles_per_ipu",))
    many = root / "many"
    for k in range(1_100):
        (many / f"e{k}").mkdir(parents=True)
        (many / f"e{k}" / "popviz-model.json").write_text("{}")
    c.add("1,100 engines", "analyse", many, needles=("more than 1,000 engines",))
    return c


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci")
    cases = build(root)
    before = snapshot(root)
    jobs = [[name, argv, env, cwd] for name, (argv, env, cwd, _, _) in cases.jobs.items()]
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(jobs), capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, cases, json.loads(proc.stdout), before, snapshot(root)


def check(name: str, cases: Cases, out: dict) -> str | None:
    """What is wrong with case ``name``'s outcome, or None."""
    _, _, _, codes, needles = cases.jobs[name]
    code, stdout, stderr = out[name]
    if code == "hang":
        return "hang guard: still running after 120 s"
    if code not in codes:
        return f"exit {code} (expected {sorted(codes)}): {stderr.strip()[-600:] or stdout[-600:]}"
    if "Traceback" in stdout + stderr or "internal error" in stderr:
        return f"traceback: {stderr[-600:]}"
    for text in (stdout, stderr):
        if any(c in text for c in "\x1b\x07\x9b"):
            return f"control sequence in the output: {text[-300:]!r}"
    commands = [line for line in stdout.splitlines() if line.lstrip().startswith("::")]
    if not all(line.startswith("::error title=popviz ") for line in commands):
        return f"workflow command from a file: {commands}"
    if code == 2:
        lines = unwrapped(stderr.strip()).splitlines()  # one message, wrapped at the width
        if len(lines) != 1:
            return f"not one line: {stderr!r}"
        missing = [n for n in needles if n not in lines[0]]
        if missing:
            return f"{missing} not in {lines[0]!r}"
    return None


def test_every_case(results):
    _, cases, out, _, _ = results
    assert len(cases.jobs) >= 60
    wrong = {name: why for name in cases.jobs if (why := check(name, cases, out))}
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items())


def test_inputs_are_byte_identical_and_nothing_is_written_outside_the_targets(results):
    _, _, _, before, after = results
    added = {k: v for k, v in after.items() if k not in before}
    changed = {k for k in before if after.get(k) != before[k]}
    # what the successful commands were asked to write, and nothing else
    assert changed == set(), changed
    allowed = ("lab.db", "hh.db", "summary.md", "page.html", "plots")
    assert all(k.startswith(allowed) for k in added), sorted(added)


def test_the_one_github_annotation_per_regression_is_escaped(results):
    _, _, out, _, _ = results
    _, stdout, _ = out["hostile names through compare --github"]
    commands = [line for line in stdout.splitlines() if line.startswith("::")]
    assert len(commands) >= 1
    assert all("%0A" in line and "\n" not in line for line in commands)


def test_markdown_from_the_cli_shows_names_as_text(results):
    _, _, out, _, _ = results
    _, md, _ = out["hostile names through history show --markdown"]
    assert "<b>" not in md and "&lt;b&gt;" in md
    _, md, _ = out["hostile names through analyse --markdown"]
    assert "\n::" not in md and "\\[link=https://e.x\\]y\\[/link\\]" in md


def test_strict_json_out(results):
    _, _, out, _, _ = results
    _, stdout, _ = out["compare --json strict"]

    def refuse(token):
        raise AssertionError(token)

    assert json.loads(stdout, parse_constant=refuse)["failed"] is True


def test_plan_reruns_only_the_command_its_own_capture_recorded(tmp_path):
    from conftest import run_cli

    layers = testing.layer_table([100, 1000, 1000, 1000, 1000, 1500],
                                 names=["emb", "l0", "l1", "l2", "l3", "head"],
                                 roles=["embeddings", "layer", "layer", "layer", "layer", "head"],
                                 pins=["first", None, None, None, None, "last"], layers_per_ipu=[2, 2],
                                 weight_bytes=[100_000, 60_000, 60_000, 60_000, 60_000, 10_000],
                                 activation_bytes=[0, 20_000, 20_000, 20_000, 20_000, 0])
    capture = tmp_path / "downloads" / "run"
    engine = write_bundle(testing.layered_report(layers, name="train", tiles_per_ipu=1,
                                                 gradient_accumulation=16), capture / "train")
    planted = {"format": "popviz-run", "format_version": 1, "command": ["sh", "-c", "rm -rf ~"],
               "cwd": str(tmp_path), "status": "succeeded"}
    (tmp_path / "downloads" / "popviz-run.json").write_text(json.dumps(planted))
    proc = run_cli("plan", str(engine), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "rm -rf" not in proc.stdout and "is not recorded" in proc.stdout
    # the capture's own record (it lists the engine): its command, marked as recorded
    own = {**planted, "command": ["python", "train.py"], "engines": [{"path": "train"}]}
    (capture / "popviz-run.json").write_text(json.dumps(own))
    proc = run_cli("plan", str(engine), cwd=tmp_path)
    assert "-- python train.py" in " ".join(proc.stdout.replace(" \\\n", " ").split())  # continuation lines
    assert "the command recorded in downloads/run/popviz-run.json" in " ".join(proc.stdout.split())
    doc = json.loads(run_cli("plan", "--json", str(engine), cwd=tmp_path).stdout)
    assert doc["rerun_command_recorded_in"] == "downloads/run/popviz-run.json"


def test_split_plan_file_that_is_a_fifo_or_nested_deep_is_one_line(tmp_path):
    import signal

    from popviz.errors import PopvizError
    from popviz.plan_file import parse_split

    def hang(*_):
        raise TimeoutError("waited on the FIFO")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        with pytest.raises(PopvizError, match="FIFO"):
            parse_split(str(fifo(tmp_path / "plan.json")))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(PopvizError, match="deeply"):
        parse_split(str(deep))


def test_a_figure_that_fails_to_draw_leaves_no_file(tmp_path):
    from popviz.errors import PopvizError
    from popviz.fileio import write_new_bytes

    def fail(fh):
        fh.write(b"half a PNG")
        raise RuntimeError("drawing failed")

    with pytest.raises(RuntimeError):
        write_new_bytes(tmp_path / "f.png", fail)
    assert list(tmp_path.iterdir()) == []
    write_new_bytes(tmp_path / "f.png", b"ok")
    with pytest.raises(PopvizError, match="exists"):
        write_new_bytes(tmp_path / "f.png", b"again")
    assert (tmp_path / "f.png").read_bytes() == b"ok"


def test_history_on_a_file_nobody_may_write_is_read_immutable_and_untouched(tmp_path, monkeypatch):
    """(Root may write anything, so the read-only case is made by saying so: os.access.)"""
    from popviz.ci import history

    rep = write_bundle(testing.pipeline_report([1000, 3000], name="train", tiles_per_ipu=8), tmp_path / "r" / "t")
    db = history_db(tmp_path / "h.db", rep.parent)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    monkeypatch.setattr(history.os, "access", lambda *a, **k: False)
    h = history.read(db)
    assert [r.label for r in h.runs] == ["a", "b"]
    median = history.median_side(db)
    assert len(median.runs["train"]) == 2 and median.engines[0].metrics
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
