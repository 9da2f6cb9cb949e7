"""Code in recommendations is printed whole: never cut inside an identifier, at any width, piped
or not; the lines of one piece of code pasted together are valid Python."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

import popviz
from popviz.analysis import analyse
from popviz.render import console, text
from popviz.render.text import wrap_code_prose

from conftest import ROOT

SAMPLES = ROOT / "sample_reports"
CONTINUES = re.compile(r"([(,.])\n\s+")


def _collapse(out: str) -> str:
    """Console output with each line's padding gone and code continuation lines joined back."""
    return CONTINUES.sub(r"\1", "\n".join(line.rstrip() for line in out.splitlines()))


def _code(result) -> list[str]:
    return [piece for f in result.findings for piece, code in text.code_spans(f.recommendation) if code]


def _check(out: str, spans: list[str]) -> None:
    joined = _collapse(out)
    for span in spans:
        compile(span, "<recommendation>", "eval")  # valid Python on its own
        assert span in joined, span


@pytest.mark.parametrize("width", [80, 100])
def test_no_identifier_is_cut_at_80_and_100_columns(width):
    result = analyse(popviz.load(SAMPLES))
    spans = _code(result)
    assert len(spans) >= 20
    buf = io.StringIO()
    console.render(result, file=buf, width=width)
    out = buf.getvalue()
    _check(out, spans)
    # the lines stay within the width, except a code line that cannot be cut (none here)
    assert max(len(line.rstrip()) for line in out.splitlines()) <= width


def test_no_identifier_is_cut_when_piped():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "popviz", "analyse", str(SAMPLES)], env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    _check(proc.stdout, _code(analyse(popviz.load(SAMPLES))))


def test_wrap_breaks_code_only_inside_brackets():
    prose = ("offload it with opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings()"
             ".useOnChipStorage(False)); then retry.")
    lines = ["".join(p for p, _ in line) for line in wrap_code_prose(prose, 60)]
    assert lines == ["offload it with",
                     "opts.TensorLocations.setOptimizerLocation(",
                     "    poptorch.TensorLocationSettings().useOnChipStorage(",
                     "    False)); then retry."]
    # a piece still too long at "(" and ",": broken at "." inside the call too
    lines = ["".join(p for p, _ in line) for line in wrap_code_prose(prose, 30)]
    assert lines == ["offload it with", "opts.TensorLocations.setOptimizerLocation(", "    poptorch.",
                     "    TensorLocationSettings().", "    useOnChipStorage(False));", "then retry."]


def test_an_opening_bracket_goes_to_the_next_line_with_its_code():
    """Was: "... proportion (" at the end of a line, "opts.setAvailableMemoryProportion) or ..." on the next."""
    prose = "Lower the available memory proportion (opts.setAvailableMemoryProportion) or move blocks off IPU1."
    lines = ["".join(p for p, _ in line) for line in wrap_code_prose(prose, 60)]
    assert lines == ["Lower the available memory proportion",
                     "(opts.setAvailableMemoryProportion) or move blocks off IPU1."]


def test_a_number_is_never_separated_from_its_unit_at_a_line_break():
    from popviz.render.text import prewrap, words

    assert words("in 976.1 µs, 357,417,792 B (340.9 MiB) free; 3 stages") == [
        "in", "976.1 µs,", "357,417,792 B", "(340.9 MiB)", "free;", "3", "stages"]
    # 'B' breaks before the parenthesis, never between the figure and its unit
    assert prewrap("IPU1 62.0% (21.1 points less, 357,417,792 B (340.9 MiB) free)", 44) == (
        "IPU1 62.0% (21.1 points less, 357,417,792 B\n(340.9 MiB) free)")
    assert prewrap("  one call in 976.1 µs per micro-batch", 20) == "  one call in\n  976.1 µs per\n  micro-batch"
    # the recommendation's wrapper keeps them together too
    lines = ["".join(piece for piece, _ in line) for line in
             wrap_code_prose("saves about 160,108,032 B (152.7 MiB) of it", 30)]
    assert lines == ["saves about 160,108,032 B", "(152.7 MiB) of it"]


def test_console_at_80_columns_keeps_figures_with_their_units():
    from conftest import run_cli

    out = run_cli("analyse", str(SAMPLES / "oom_model"), env={"COLUMNS": "80"}).stdout
    out += run_cli("analyse", str(SAMPLES / "lightning_pipeline"), env={"COLUMNS": "80"}).stdout
    # no line (nor panel row) starts with a unit whose figure ended the line before
    assert not re.search(r"\d\n[│ ]*(?:B|KiB|MiB|GiB|ms|µs)\b", out)
    assert "(16.1 KiB)" in out and "about 396,953,600 B" in out
