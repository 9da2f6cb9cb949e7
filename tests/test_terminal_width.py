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
    check(run_cli("history", "add", mnist, "--db", "h.db", cwd=tmp_path, env=env))
    check(run_cli("history", "show", "--db", "h.db", cwd=tmp_path, env=env))
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
