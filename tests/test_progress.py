"""Progress of emulated runs (popviz.emulator.progress) and the capture summary's times."""

from __future__ import annotations

import time

import pytest

from popviz.capture.launcher import _times_text
from popviz.emulator import progress


@pytest.fixture
def fast_heartbeat(monkeypatch):
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.2)


def _lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_plain_steps_and_heartbeats(fast_heartbeat, capsys):
    rep = progress.Reporter("plain")
    try:
        rep.script_started()
        with rep.activity("'training': running call 1 on the CPU", 4) as act:
            act.advance(1)
            time.sleep(0.7)
        rep.say("'training': call 1 done")
        time.sleep(0.7)
    finally:
        rep.close()
    lines = _lines(capsys)
    assert lines[0] == "popviz emulator: 'training': running call 1 on the CPU"
    beats = lines[1:lines.index("popviz emulator: 'training': call 1 done")]
    assert beats and all(b.startswith("popviz emulator: 'training': running call 1 on the CPU, micro-batch 2 of 4 (")
                         and b.endswith(" s)") for b in beats)
    after = lines[lines.index("popviz emulator: 'training': call 1 done") + 1:]
    assert after and all(b.startswith("popviz emulator: the script runs between PopTorch calls (") for b in after)


def test_a_quick_unannounced_step_prints_nothing(monkeypatch, capsys):
    # a 2 s heartbeat (the beat looks every 0.5 s): the step stays "quick" however loaded the
    # machine (with 0.2 s, one slow switch between the two lines below would print a beat)
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 2.0)
    rep = progress.Reporter("plain")
    try:
        with rep.activity("'training': running call 7 on the CPU", 4, announce=False) as act:
            act.advance(4)
        time.sleep(0.6)  # the beat has looked at least once since the step ended
    finally:
        rep.close()
    assert capsys.readouterr().err == ""


def test_off_prints_nothing(capsys):
    rep = progress.Reporter("off")
    rep.script_started()
    with rep.activity("compiling", 2) as act:
        act.advance(2)
    rep.say("done")
    assert capsys.readouterr().err == ""


def test_mode_from_the_environment(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.delenv("POPVIZ_EMULATOR_CALLS", raising=False)
    assert progress.mode() == "off"  # the emulator used by hand, in-process: as quiet as PopTorch
    monkeypatch.setenv("POPVIZ_EMULATOR_CALLS", "2")
    assert progress.mode() == "plain"
    monkeypatch.setenv(progress.ENV, "RICH")
    assert progress.mode() == "rich"


RUN = {"emulated": True, "environment": {}}


@pytest.mark.parametrize(("model", "run", "text"), [
    # the call that compiled took 80 s: 3.8 s of estimate, the rest ran the call on the CPU
    ({"compile_seconds": 80.0, "poptorch_compile_seconds": 3.8, "later_calls_seconds": 76.2, "calls": 2},
     RUN, ", estimated in 3.80 s, calls run on the CPU in 152 s"),
    ({"compile_seconds": 4.1, "poptorch_compile_seconds": 3.9, "later_calls_seconds": 0.001, "calls": 1},
     {"emulated": True, "environment": {"POPVIZ_EMULATOR_CALLS": "1"}}, ", estimated in 3.90 s, not run (--calls 1)"),
    ({"compile_seconds": 95.0, "poptorch_compile_seconds": 61.0, "calls": 5}, {}, ", compiled in 61 s"),
    ({"compile_seconds": 95.0, "poptorch_compile_seconds": None, "calls": 5}, {}, ", compile and first call 95 s"),
    ({"compile_seconds": None, "calls": 0}, RUN, ""),
    # a tiny model: milliseconds, as the emulator's own progress line says them ("0.0 s" before)
    ({"compile_seconds": 0.05, "poptorch_compile_seconds": 0.012, "later_calls_seconds": 0.0, "calls": 1},
     {"emulated": True, "environment": {"POPVIZ_EMULATOR_CALLS": "1"}}, ", estimated in 12 ms, not run (--calls 1)"),
])
def test_summary_times_keep_estimate_and_execution_apart(model, run, text):
    assert _times_text(model, run) == text


def test_capture_on_a_terminal_draws_heartbeats_over_each_other():
    import io

    from popviz.capture.status_line import CLEAR, StatusLine

    err, out = io.BytesIO(), io.BytesIO()
    status = StatusLine(err, 40)
    status.write(err, b"popviz emulator: compiling 'training'\npopviz emulator: 'training': running call 1 on t", True)
    status.write(err, b"he CPU, micro-batch 2 of 16 (4 s)\n", True)
    status.write(err, b"popviz emulator: 'training': running call 1 on the CPU, micro-batch 3 of 16 (8 s)\n", True)
    status.write(out, b"step 1/2: loss 0.7\n", False)  # the script's own output clears the status line first
    status.write(err, b"popviz emulator: the script runs between PopTorch calls (4 s)\nWarn", True)
    status.close()
    assert out.getvalue() == b"step 1/2: loss 0.7\n"
    assert err.getvalue() == (b"popviz emulator: compiling 'training'\n"
                              + CLEAR + b"popviz emulator: 'training': running..."  # cut to the width
                              + CLEAR + b"popviz emulator: 'training': running..."
                              + CLEAR  # before stdout's line
                              + CLEAR + b"popviz emulator: the script runs bet..."
                              + CLEAR + b"Warn")


def test_the_summary_says_when_calls_stopped_the_script_before_later_models():
    from pathlib import Path

    from popviz.capture.launcher import summary_lines

    engine = {"path": "training", "files": ["popviz-report.json"],
              "model": {"mode": "training", "calls": 1, "compile_seconds": 0.2, "poptorch_compile_seconds": 0.1}}
    run = {"command_line": "python train.py", "exit_code": 0, "duration_seconds": 2.0, "engines": [engine],
           "emulated": True, "environment": {"POPVIZ_EMULATOR_CALLS": "1"}}
    lines = summary_lines(run, Path("out"))
    assert lines[2] == ("  --calls 1 stopped the script there: models built or called later (validation; Lightning's "
                        "training, after its sanity check) are not captured; raise --calls to reach them")
    full = summary_lines({**run, "environment": {}}, Path("out"))
    assert not any("--calls" in line for line in full)


def test_a_calls_limit_no_executor_reached_stopped_nothing():
    """--calls 5 with 1 training and 4 inference calls: the limit is per executor, so the script ran
    to its end and no line says otherwise."""
    from pathlib import Path

    from popviz.capture.launcher import summary_lines

    def engine(name, calls):
        return {"path": name, "files": ["popviz-report.json"],
                "model": {"mode": name, "calls": calls, "compile_seconds": 0.2, "poptorch_compile_seconds": 0.1}}

    run = {"command_line": "python train.py", "exit_code": 0, "duration_seconds": 2.0, "emulated": True,
           "engines": [engine("training", 1), engine("inference", 4)], "environment": {"POPVIZ_EMULATOR_CALLS": "5"}}
    assert not any("--calls" in line for line in summary_lines(run, Path("out")))
    run["engines"][1]["model"]["calls"] = 5
    assert any(line.startswith("  --calls 5 stopped the script there") for line in summary_lines(run, Path("out")))


def test_summary_lines_fit_the_terminal_and_name_every_n_with_its_period():
    from pathlib import Path

    from popviz.capture.launcher import summary_lines
    from popviz.ui import wrap_line as wrap_summary_line

    engine = {"path": "training", "files": ["popviz-report.json"],
              "model": {"mode": "training", "calls": 1, "compile_seconds": 0.2, "poptorch_compile_seconds": 0.1,
                        "execution_strategy": "PipelinedExecution", "stages": 4, "device_iterations": 8,
                        "gradient_accumulation": 16, "replication_factor": 1, "output_mode": "EveryN",
                        "output_return_period": 2}}
    run = {"command_line": "python train.py", "exit_code": 0, "duration_seconds": 2.0, "engines": [engine],
           "emulated": True, "environment": {"POPVIZ_EMULATOR_CALLS": "1"}}
    lines = summary_lines(run, Path("out"))
    assert "D=8 G=16 R=1, output EveryN(2)" in lines[1]
    wrapped = [part for line in lines for part in wrap_summary_line(line, 80)]
    assert max(map(len, wrapped)) <= 80
    assert " ".join(" ".join(wrapped).split()) == " ".join(" ".join(lines).split())  # nothing lost
    calls = wrap_summary_line(lines[2], 80)
    assert len(calls) > 1 and all(part.startswith("      ") for part in calls[1:])  # under its own indent
    assert wrap_summary_line("  " + "x" * 100, 80) == ["  " + "x" * 100]  # a path is never broken
