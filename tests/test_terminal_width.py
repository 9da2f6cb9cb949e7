"""Issue 42, "the terminal": with COLUMNS=80, every line every command writes (results, errors,
progress, headlines, the commands it prints to run) is at most 80 columns — broken between words,
commands as continuation lines — except a word longer than that (a path), kept whole."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, run_cli, unwrapped

WIDTH = 80


def lines_over(text: str, width: int = WIDTH) -> list[str]:
    """Lines over ``width`` but those made of one word longer than it (a path, kept whole)."""
    return [line for line in text.splitlines()
            if len(line) > width and len(line.strip().removesuffix(" \\").split(" ")) > 1]


def check(proc, *, code: int | tuple[int, ...] = 0) -> str:
    codes = code if isinstance(code, tuple) else (code,)
    assert proc.returncode in codes, (proc.returncode, proc.stderr)
    out = proc.stdout + proc.stderr
    assert lines_over(out) == [], lines_over(out)
    return out


COMMANDS = [
    (("analyse", "mnist_pipeline"), 0),
    (("analyse", "."), 0),  # every sample, run by run
    (("analyse", "oom_model"), 0),
    (("plan", "bert_even_split"), 0),
    (("plan", "oom_model"), 0),
    (("plan", "mnist_pipeline", "--max-ipus", "4"), 0),
    (("compare", "bert_even_split", "bert_planned"), 0),
    (("compare", "bert_planned", "bert_even_split"), 1),  # the FAIL headline (was one 443-column line)
    (("compare", "mnist_pipeline", "cnn_replicated"), 1),  # configuration changes of another model
    (("analyse", "mnist_pipeline", "--fail-on", "info"), 1),  # the findings --fail-on names
    (("analyse", "mnist_pipeline", "--ignore", "HIO001", "--fail-on", "warning"), 1),
    (("check", "mnist_pipeline", "--budget", "pipeline.imbalance_ratio=1.0"), 2),
    (("analyse", "no/such/report"), 2),
    (("compare", "no/such/base", "bert_planned"), 2),
    (("--help",), 0), (("analyse", "--help"), 0), (("capture", "--help"), 0), (("emulate", "--help"), 0),
    (("plan", "--help"), 0), (("compare", "--help"), 0), (("history", "--help"), 0), (("plot", "--help"), 0),
    (("baseline", "--help"), 0), (("export", "--help"), 0), (("check", "--help"), 0),
]


@pytest.mark.parametrize("argv, code", COMMANDS, ids=[" ".join(a) for a, _ in COMMANDS])
def test_reading_commands_fit_80_columns(argv, code):
    check(run_cli(*argv, cwd=SAMPLES, env={"COLUMNS": str(WIDTH)}), code=code)


def test_writing_commands_fit_80_columns(tmp_path: Path):
    env = {"COLUMNS": str(WIDTH)}
    mnist = str(SAMPLES / "mnist_pipeline")
    check(run_cli("baseline", "save", mnist, "-o", "b.json", cwd=tmp_path, env=env))
    check(run_cli("history", "add", mnist, "--db", "h.db", "--label", "c1", cwd=tmp_path, env=env))
    out = check(run_cli("history", "add", mnist, "--db", "h.db", "--label", "c1", cwd=tmp_path, env=env))
    assert "popviz: note: run #1 (c1) has the same label 'c1'; both are kept" in unwrapped(out)
    check(run_cli("history", "add", str(SAMPLES / "bert_pipeline"), "--db", "h.db", "--label", "c3", cwd=tmp_path,
                  env=env))
    deep = tmp_path / "a-directory-with-a-rather-long-name" / "and-another-one-below-it"
    deep.mkdir(parents=True)
    out = check(run_cli("history", "add", mnist, "--db", str(deep / "h.db"), cwd=tmp_path, env=env))
    assert unwrapped(out).strip() == ("popviz: added run #1 to a-directory-with-a-rather-long-name/"
                                      "and-another-one-below-it/h.db: 2 engine(s), 44 metric(s)")
    for fmt in ((), ("--all",), ("--html", "h.html")):
        out = check(run_cli("history", "show", "--db", "h.db", *fmt, cwd=tmp_path, env=env))
        head = unwrapped(out).splitlines()[0]  # the headline: broken between words, not one 194-column line
        assert head.startswith("popviz history: 3 run(s), #1 (c1) to #3 (c3); step regression at #3 (c3) in ")
        assert len(head) > WIDTH and out.splitlines()[1].startswith("    ")
    check(run_cli("export", mnist, "-o", "bundles", cwd=tmp_path, env=env))
    out = check(run_cli("plot", mnist, "-o", "figs", cwd=tmp_path, env=env, timeout=600))
    assert "training-timeline.png" in out
    check(run_cli("analyse", mnist, "--html", "r.html", cwd=tmp_path, env=env, timeout=600))
    # plan's check command, as continuation lines that a shell joins back into the command
    out = check(run_cli("plan", str(SAMPLES / "bert_even_split"), cwd=tmp_path, env=env))
    rest = out[out.index("check it under the emulator"):].splitlines()
    command = rest[next(i for i, line in enumerate(rest) if line.startswith(("  cd ", "  popviz capture "))):]
    command = command[:next(i for i, line in enumerate(command) if not line.endswith(" \\")) + 1]
    assert len(command) > 1 and all(line.endswith(" \\") for line in command[:-1])
    joined = " ".join(line.strip().removesuffix(" \\") for line in command)
    assert joined.startswith("cd ") or joined.startswith("popviz capture --emulate --calls 1 --split "
                                                         "layers_per_ipu=1,4,4,3 ")
    # (where the recorded directory does not exist here, a comment after the command names it)
    joined = joined.partition(" # from the directory holding ")[0]
    assert "--split layers_per_ipu=1,4,4,3 -o " in joined and joined.endswith("--gradient-accumulation 64")


@pytest.mark.slow  # an emulated capture and an emulated run: about 20 CPU-seconds
def test_an_emulated_capture_and_emulate_fit_80_columns(tmp_path: Path):
    """Their own lines, the emulator's progress and stop lines and the summary; emulate says what
    it runs before the script's imports."""
    env = {"COLUMNS": str(WIDTH), "OMP_NUM_THREADS": "1"}
    script = [sys.executable, str(ROOT / "examples" / "mnist_pipeline.py"), "--steps", "1"]
    out = check(run_cli("capture", "-o", "c", "--emulate", "--calls", "1", "--", *script, cwd=tmp_path, env=env,
                        timeout=900))  # a hang guard only: the capture takes seconds
    assert "stopping the script (--calls 1)" in unwrapped(out)
    proc = run_cli("emulate", "--calls", "1", "--", *script, cwd=tmp_path, env=env, timeout=900)
    out = check(proc)
    assert out.startswith("popviz emulate: running ")
    # a warning printed from inside the emulated script (the emulator's log), and its errors
    (tmp_path / "co.py").write_text(CUSTOM_OP_SCRIPT)
    out = check(run_cli("emulate", "--", sys.executable, "co.py", cwd=tmp_path, env=env, timeout=900))
    assert ("popviz emulator: warning: custom op my.custom.domain::NoCpuOp (version 1) has no CPU implementation: "
            "its outputs are zeros shaped like example_outputs") in unwrapped(out)
    out = check(run_cli("emulate", "--split", "layers_per_ipu=9,9,9,9", "--", *script, cwd=tmp_path, env=env,
                        timeout=900), code=2)
    assert "popviz: error: " in out


CUSTOM_OP_SCRIPT = """
import torch, poptorch
class Net(torch.nn.Module):
    def forward(self, x):
        return poptorch.custom_op([x], "NoCpuOp", "my.custom.domain", 1, example_outputs=[x])[0]
model = poptorch.inferenceModel(Net())
print(model(torch.randn(2, 3)).shape)
"""


def test_the_continuation_helpers():
    from popviz.ui import wrap_code, wrap_command

    cmd = "popviz capture --emulate -o 'my runs/a b' -- python train.py --layers-per-ipu 1,4,4,3 --steps 1"
    lines = wrap_command(cmd, 40, "  ")
    assert lines == ["  popviz capture --emulate -o \\", "      'my runs/a b' -- python train.py \\",
                     "      --layers-per-ipu 1,4,4,3 --steps 1"]
    assert " ".join(x.strip().removesuffix(" \\") for x in lines) == cmd  # the quoted path kept whole
    assert wrap_code("IPUConfig(layers_per_ipu=[3, 5], ipus_per_replica=2, matmul_proportion=[0.05, 0.15])",
                     60, "  ") == ["  IPUConfig(layers_per_ipu=[3, 5], ipus_per_replica=2,",
                                   "      matmul_proportion=[0.05, 0.15])"]
    assert wrap_command("short", 80) == ["short"]
    # a comment too long for a line of its own goes on comment lines (a recorded directory whose
    # path does not exist here is named after the command: the line must still fit)
    long = "popviz capture --emulate -- python examples/bert.py  # from the directory holding examples/bert.py " \
           "(recorded: /a/rather/long/directory/path)"
    assert wrap_command(long, 40, "  ") == [
        "  popviz capture --emulate -- python \\", "      examples/bert.py \\",
        "      # from the directory holding", "      # examples/bert.py (recorded:",
        "      # /a/rather/long/directory/path)"]


def test_the_emulators_warnings_fit(monkeypatch, capsys):
    """A warning from inside the emulated script (its log, as PopTorch's logger would print it)."""
    from popviz.emulator import log

    monkeypatch.setenv("COLUMNS", "80")
    log.warn("custom op my.custom.domain::NoCpuOp (version 1) has no CPU implementation: its outputs are "
             "zeros shaped like example_outputs")
    assert capsys.readouterr().err.splitlines() == [
        "popviz emulator: warning: custom op my.custom.domain::NoCpuOp (version 1) has no",
        "    CPU implementation: its outputs are zeros shaped like example_outputs"]


def test_the_emulators_lines_fit_and_its_heartbeat_stays_one_line(monkeypatch, capsys):
    from popviz.emulator import progress

    monkeypatch.setenv("COLUMNS", "80")
    progress.line("'training': call 1 of 1 estimated, not run; stopping the script (--calls 1); reports are "
                  "written as it exits")
    progress.line("compiling 'a-rather-long-engine-name': tracing and measuring one micro-batch (12 s)",
                  one_line=True)
    err = capsys.readouterr().err.splitlines()
    assert err == ["popviz emulator: 'training': call 1 of 1 estimated, not run; stopping the script",
                   "    (--calls 1); reports are written as it exits",
                   "popviz emulator: compiling 'a-rather-long-engine-name': tracing and… (12 s)"]


MARKDOWN_COMMANDS = [
    *[("analyse", d.name, "--markdown") for d in sorted(SAMPLES.iterdir()) if (d / "popviz-report.json").exists()
      or any(d.glob("*/popviz-report.json"))],
    ("compare", "bert_even_split", "bert_planned", "--markdown"),
    ("plan", "bert_even_split", "--markdown"),
]


@pytest.mark.parametrize("args", MARKDOWN_COMMANDS, ids=lambda a: "-".join(a))
def test_markdown_soft_wraps_and_renders_the_same(args):
    # Markdown on stdout at 80 columns: paragraphs and list items soft-wrapped (a soft line break
    # renders as a space), commands and code broken as on the console; table rows cannot be broken
    import re

    from markdown_it import MarkdownIt  # rich's dependency

    from popviz.ui import markdown_fitted

    narrow = run_cli(*args, cwd=SAMPLES, env={"COLUMNS": "80"})
    wide = run_cli(*args, cwd=SAMPLES, env={"COLUMNS": "1000"})
    assert narrow.returncode == wide.returncode and narrow.returncode in (0, 1), narrow.stderr
    prose = "\n".join(line for line in narrow.stdout.splitlines() if not line.startswith("|"))
    assert lines_over(prose) == []
    md = MarkdownIt("commonmark").enable("table")
    def norm(text: str) -> str:
        return re.sub(r"\s+", " ", md.render(text))
    if args[0] != "plan":  # plan's code blocks are broken into continuation lines, not soft-wrapped
        assert norm(narrow.stdout) == norm(wide.stdout)
    assert norm(markdown_fitted(wide.stdout, 80)) == norm(wide.stdout)


def test_markdown_breaks_never_open_a_block():
    from popviz.ui import markdown_fitted

    text = "- " + "word " * 14 + "- not a list, # not a heading, 2. not a list either " + "x " * 30
    out = markdown_fitted(text, 60).splitlines()
    assert all(len(line) <= 60 for line in out)
    assert [line for line in out[1:] if not line.startswith("  ") or line.lstrip()[:2] in ("- ", "# ", "2.")] == []
    assert " ".join(line.strip() for line in out) == text.strip()
