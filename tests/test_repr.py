"""What a REPL user sees: short summaries of Result, EngineResult, Report and ReportSet."""

from __future__ import annotations

import io

import popviz
from popviz.render.console import render

from conftest import SAMPLES


def test_result_repr_is_a_short_summary_with_the_top_findings():
    result = popviz.analyse(popviz.load(SAMPLES / "mnist_pipeline"))
    text = repr(result)
    assert str(result) == text
    assert text.splitlines() == [
        f"<popviz Result of {SAMPLES / 'mnist_pipeline'}: 2 engines, 2 warnings, 1 info (worst: warning)",
        "  inference (estimated): 2 warnings; first to fix: HIO001 IPU0 waits for the host: 25.4% of its cycles in "
        "stream copies",
        # the first of the ranked actions, as popviz analyse's "What to fix first" lists them
        "  training (estimated): 1 info; first to fix: HIO002 Training returns every micro-batch's outputs "
        "(OutputMode.All)",
        "  data: .engines[i].findings / .metrics / .plan / .not_checked; all of it as text: "
        "popviz.render.console.render(result)>",
    ]
    assert len(result.findings) == 3  # the data is one attribute away
    assert repr(result.engines[1]).startswith("<EngineResult training (estimated): 1 info; first to fix: "
                                                  "HIO002 ")
    out = io.StringIO()
    render(result, file=out, width=100)  # what the last line promises
    assert "HIO002" in out.getvalue() and len(out.getvalue()) > 10 * len(text)


def test_result_repr_counts_severities_most_severe_first():
    result = popviz.analyse(popviz.load(SAMPLES / "oom_model"))
    first = repr(result).splitlines()[0]
    counts = {s: sum(f.severity == s for f in result.findings) for s in ("error", "warning", "info")}
    assert counts["error"] == 2  # MEM001 (IPU0 out of memory) and MEM006 (the step where it overflows)
    expected = ", ".join(f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in counts.items() if n)
    assert first.endswith(f"1 engine, {expected} (worst: error)")
    assert "first to fix: MEM001 " in repr(result)


def test_result_without_findings():
    result = popviz.analyse(popviz.load(SAMPLES / "bert_planned"))
    assert repr(result).splitlines()[:2] == [
        f"<popviz Result of {SAMPLES / 'bert_planned'}: 1 engine, no findings",
        "  training (estimated): no findings"]


def test_report_and_report_set_reprs():
    reports = popviz.load(SAMPLES / "mnist_pipeline")
    assert repr(reports) == f"ReportSet(root={str(SAMPLES / 'mnist_pipeline')!r}, engines=['inference', 'training'])"
    assert repr(reports["training"]).startswith("Report(name='training', source='emulator', estimated=True, ")


def test_analyse_takes_a_report_directory_path_as_a_repl_user_types_it():
    by_path = popviz.analyse(str(SAMPLES / "mnist_pipeline"))
    assert repr(by_path) == repr(popviz.analyse(popviz.load(SAMPLES / "mnist_pipeline")))
    assert len(popviz.analyse(SAMPLES / "oom_model").findings) == len(
        popviz.analyse(popviz.load(SAMPLES / "oom_model")).findings)


def test_analyse_of_something_else_says_what_it_takes():
    import pytest

    with pytest.raises(TypeError, match=r"^popviz.analyse takes a Report, a ReportSet or a report "
                                        r"directory's path, not int$"):
        popviz.analyse(3)
