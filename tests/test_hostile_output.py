"""Names from files are data in every output channel (issue 23): every renderer walked with
hostile engine, instance, layer, block, run and finding names (terminal escapes, rich markup,
GitHub workflow commands, HTML, Markdown structure, mathtext, lone surrogates).

Whatever the names, no control character or escape sequence reaches terminal output, rich
markup is shown rather than interpreted, Markdown has the structure (headings, HTML tags,
lines) it has with a harmless name, JUnit is well-formed XML, JSON is strict, and the only
workflow commands are popviz's own.

Budget: ``POPVIZ_FUZZ_EXAMPLES`` examples per test (default 25 here; the long run of
tests/test_fuzz.py sets it higher).
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import unicodedata
from types import SimpleNamespace
from xml.etree import ElementTree as ET

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from popviz import escape, testing
from popviz.analysis import analyse
from popviz.ci import render as ci_render
from popviz.ci.baseline import EngineMetrics
from popviz.ci.compare import check_budgets, compare
from popviz.ci.thresholds import parse_budget
from popviz.model import ReportSet
from popviz.render import console, markdown
from popviz.render import json as render_json

EXAMPLES = int(os.environ.get("POPVIZ_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 40,
                # the default run does not shrink (a failure is reproduced exactly by the same seed)
                phases=[Phase.explicit, Phase.reuse, Phase.generate] if EXAMPLES <= 40 else list(Phase),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

FRAGMENTS = [
    "\x1b]52;c;cm0gLXJmIH4=\x07",       # OSC 52: write the clipboard
    "\x1b]0;pwned\x07",                 # window title
    "\x1b[2J\x1b[H",                    # clear the screen
    "\x9b31m", "\x1bP+q\x1b\\", "\x07", "\x00", "\r", "\x7f", "\u202e",
    "[link=https://evil.example]x[/link]", "[/x]", "[bold]", "\\",
    "\n::warning::forged", "::stop-commands::tok", "%0A::error::x", "::",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "&amp;",
    "\n## no regression", "`", "|", "[a](https://evil.example)", "*", "_", "# ", "- ", "1. ",
    "$\\foo{$", "$x$", "\ud800", "\udcff",
    "layer", "encoder.0", "a b",
]
names = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), min_size=1, max_size=4).map("".join) \
    .filter(lambda s: s.strip() != "")


def terminal_safe(text: str) -> None:
    """No control character (but newline and tab), no lone surrogate, no line that GitHub
    Actions would read as a workflow command."""
    bad = [c for c in text if (unicodedata.category(c) in ("Cc", "Cs") and c not in "\n\t")
           or c in "\u2028\u2029\u202e"]
    assert not bad, (bad[:5], text[:400])
    commands = [line for line in text.splitlines() if line.lstrip().startswith("::")]
    assert not commands, commands


def outside_code(md: str) -> list[str]:
    """The lines of ``md`` outside fenced code blocks (which Markdown shows as written)."""
    lines, fence = [], None
    for line in md.splitlines():
        if fence is None and line.startswith("```"):
            fence = line.rstrip()
        elif fence is not None and line.rstrip() == fence:
            fence = None
        elif fence is None:
            lines.append(line)
    return lines


def tags(html: str) -> list[str]:
    """The HTML tags in ``html``, outside Markdown's fenced code blocks."""
    return sorted(re.findall(r"<\s*/?\s*([A-Za-z][\w-]*)", "\n".join(outside_code(html))))


def markdown_like(hostile: str, benign: str) -> None:
    """Same lines, same headings, same HTML tags as the output with harmless names."""
    terminal_safe(hostile)
    assert len(hostile.splitlines()) == len(benign.splitlines())
    assert [line[:3] for line in outside_code(hostile) if line.startswith("#")] == \
        [line[:3] for line in outside_code(benign) if line.startswith("#")]
    assert tags(hostile) == tags(benign)  # no <script>, no <img onerror> outside code blocks


def strict_json(text: str):
    def refuse(token: str):
        raise AssertionError(f"non-standard JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


def report(name: str, instance: str | None, block: str, path: str):
    # Block names reach a Report only through a source, which refuses lone surrogates (a JSON
    # '\ud800' escape; test_names_with_lone_surrogates_are_refused_or_replaced_at_the_boundary):
    # the tables behind the renderers (Arrow strings) never hold one, so neither do these.
    block = block.encode("utf-8", "replace").decode("utf-8")
    r = testing.pipeline_report([1000, 3000, 2000], name=name, tiles_per_ipu=8,
                                blocks=[[block], ["b1"], [f"{block}2"]], gradient_accumulation=8)
    return r.replace(instance=instance, path=path)


def analysed(name: str, instance: str | None, block: str, path: str):
    return analyse(ReportSet([report(name, instance, block, path)], root=path, warnings=[f"warn {name}"]))


def render_all(result) -> dict[str, str]:
    buf = io.StringIO()
    console.render(result, file=buf, width=100)
    return {"console": buf.getvalue(), "markdown": markdown.render(result),
            "json": render_json.render(result)}


def dir_name(name: str) -> str:
    """``name`` as a directory name the file system takes (no separator, no NUL; surrogates as
    the bytes they stand for, or dropped)."""
    cleaned = name.replace("/", "_").replace("\x00", "_").strip() or "_"
    cleaned = "".join(c for c in cleaned if not 0xD800 <= ord(c) < 0xDC80)
    return cleaned if cleaned not in (".", "..") else "_"


def loaded(root, name: str, instance: str, block: str):
    """A bundle with hostile names written under a hostile directory name, read back through
    popviz.load (the boundary): the Result, or None when the boundary refuses it (one line)."""
    import popviz
    from popviz.errors import PopvizError
    from popviz.sources.bundle import write_bundle

    d = root / dir_name(instance) / "engine"
    try:
        write_bundle(report(name, None, block, "x"), d)
    except (UnicodeEncodeError, ValueError):
        return None  # a name the writer cannot store: it cannot come from a file either
    try:
        reports = popviz.load(root)
    except PopvizError as exc:
        assert "\n" not in exc.message
        return None
    return analyse(reports)


@functools.cache
def benign_analysis() -> dict[str, str]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        return render_all(loaded(Path(tmp), "eng", "inst", "blk"))


@FUZZ
@given(name=names, instance=names, block=names)
def test_analyse_renderers(name, instance, block, tmp_path_factory):
    result = loaded(tmp_path_factory.mktemp("r"), name, instance, block)
    if result is None:
        return
    out = render_all(result)
    benign = benign_analysis()
    terminal_safe(out["console"])
    markdown_like(out["markdown"], benign["markdown"])
    strict_json(out["json"])


def test_names_with_lone_surrogates_are_refused_or_replaced_at_the_boundary(tmp_path):
    from popviz.errors import PopvizError

    with pytest.raises(PopvizError, match="lone surrogate"):
        import popviz
        from popviz.sources.bundle import write_bundle

        d = write_bundle(report("e", None, "b", "x"), tmp_path / "a")
        meta = d / "popviz-report.json"
        meta.write_text(meta.read_text().replace('"b"', '"\\ud800"'))
        popviz.load(d)
    # a directory name that is not UTF-8 (bytes kept as surrogates by Python) is shown with U+FFFD
    import os

    root = tmp_path / "b"
    write_bundle(report("e", None, "b", "x"), os.fsdecode(os.fsencode(root / "x") + b"\xff") + "/e")
    [r] = popviz.load(root)
    assert r.instance == "x\ufffd"


@functools.cache
def benign_html() -> str:
    from popviz.render import html

    return html.render(analysed("eng", "inst", "blk", "d"), figures=False)


@FUZZ
@given(name=names, instance=names, block=names)
def test_html_page(name, instance, block):
    from popviz.render import html

    page = html.render(analysed(name, instance, block, "d"), figures=False)
    benign = benign_html()
    terminal_safe(page.replace("\n", ""))
    assert tags(page) == tags(benign)


def side(label: str, code: str, title: str, metric_value: float, *, config: dict | None = None):
    return [EngineMetrics(name=label, instance=None, source="bundle", estimated=False,
                          config=config or {"stages": [f"IPU0: {label}"], "layer_ipus": {label: 0}},
                          metrics={"pipeline.cycles_per_micro_batch": metric_value,
                                   "memory.ipu0.used_pct": 50.0},
                          findings=[{"code": code, "severity": "error", "title": title}])]


def comparison(label: str, title: str, base_label: str):
    c = compare(side(label, "PIPE001", title, 100.0), side(label, "PIPE001", title, 200.0,
                config={"stages": [f"IPU1: {title}"], "layer_ipus": {label: 1}}), [])
    c.budgets = check_budgets(side(label, "PIPE001", title, 200.0), [parse_budget("memory.*", "<= 10", "t")])
    c.findings = [{"engine": label, "code": "PIPE001", "severity": "error", "title": title, "ignored": False}]
    c.base_label = base_label
    return c


def ci_outputs(c) -> dict[str, str]:
    return {"console": ci_render.text(c, width=100), "markdown": ci_render.markdown(c, all_rows=True),
            "junit": ci_render.junit(c), "json": ci_render.as_json(c)}


@functools.cache
def benign_ci() -> dict[str, str]:
    return ci_outputs(comparison("eng", "title", "base"))


@FUZZ
@given(label=names, title=names, base_label=names)
def test_compare_and_check_renderers(label, title, base_label):
    out = ci_outputs(comparison(label, title, base_label))
    benign = benign_ci()
    terminal_safe(out["console"])
    markdown_like(out["markdown"], benign["markdown"])
    suite = ET.fromstring(out["junit"].split("?>", 1)[1])  # well-formed XML
    assert suite.get("failures") == "3"
    strict_json(out["json"])


@FUZZ
@given(label=names, metric_label=names)
def test_github_commands_are_only_popvizs_own(label, metric_label, tmp_path_factory):
    from popviz.ci.cli import emit
    from popviz.cli import _PipeSafeStdout

    c = comparison(label, metric_label, "b")
    summary = tmp_path_factory.mktemp("gh") / "summary.md"
    os.environ["GITHUB_STEP_SUMMARY"] = str(summary)
    raw = io.StringIO()
    guarded = _PipeSafeStdout(raw)
    import sys

    real, sys.stdout = sys.stdout, guarded
    try:
        code = emit(c, SimpleNamespace(json=False, markdown=False, all=True, summary=False, github=True,
                                       junit=None))
    finally:
        sys.stdout = real
        del os.environ["GITHUB_STEP_SUMMARY"]
    assert code == 1
    lines = raw.getvalue().splitlines()
    commands = [line for line in lines if line.lstrip().startswith("::")]
    assert len(commands) == 3  # one regression, one broken budget, one failing finding
    assert all(re.fullmatch(r"::error title=popviz (regression|budget|finding)::[^\r\n]*", cmd) for cmd in commands)
    terminal_safe("\n".join(line for line in lines if line not in commands))
    benign = comparison("eng", "t", "b")
    markdown_like(summary.read_text(encoding="utf-8").rstrip("\n") + "\n",
                  ci_render.markdown(benign, all_rows=True).rstrip("\n") + "\n")


def test_each_command_line_is_escaped_as_github_documents():
    line = escape.gh_command("error", "a\r\nb%c::d", title="x:y,z\n")
    assert line == "::error title=x%3Ay%2Cz%0A::a%0D%0Ab%25c::d"


@FUZZ
@given(engine=names, label=names)
def test_history_renderers(engine, label, tmp_path_factory):
    from popviz.ci import history, history_view
    from popviz.ci.trend import trends

    def shown(engine: str, label: str) -> dict[str, str]:
        db = tmp_path_factory.mktemp("h") / "h.db"
        for k, value in enumerate((100.0, 100.0, 200.0)):
            history.add(db, side(engine, "PIPE001", "t", value), label=f"{label}{k}", source="r")
        h = history.read(db)
        found = trends(h, [], [])
        buf = io.StringIO()
        from contextlib import redirect_stdout

        with redirect_stdout(buf):
            history_view.console(found, h.runs, all_rows=True)
        return {"console": buf.getvalue(), "markdown": history_view.markdown(found, h.runs, all_rows=True),
                "json": history_view.as_json(found, h.runs, "h.db")}

    out, benign = shown(engine, label), shown("eng", "lab")
    terminal_safe(out["console"])
    markdown_like(out["markdown"], benign["markdown"])
    strict_json(out["json"])


def plan_for(engine: str, layer: str, rerun: str):
    from popviz.analysis.layer_plan import make_plan

    layers = testing.layer_table([100, 1000, 1000, 1000, 1000, 1500],
                                 names=["emb", f"{layer}.0", "l1", "l2", f"{layer}.3", "head"],
                                 roles=["embeddings", "layer", "layer", "layer", "layer", "head"],
                                 pins=["first", None, None, None, None, "last"], layers_per_ipu=[2, 2],
                                 weight_bytes=[100_000, 60_000, 60_000, 60_000, 60_000, 10_000],
                                 activation_bytes=[0, 20_000, 20_000, 20_000, 20_000, 0])
    r = testing.layered_report(layers, name=engine, tiles_per_ipu=1, gradient_accumulation=16)
    return make_plan(r), rerun


@FUZZ
@given(engine=names, layer=names, rerun=names)
def test_plan_renderers(engine, layer, rerun):
    from popviz.render import plan as render_plan

    plan, cmd = plan_for(engine, layer, rerun)
    benign, bcmd = plan_for("eng", "layer", "cmd")
    terminal_safe("\n".join(render_plan.text_lines(plan, cmd, None, 100, rerun_from="x/popviz-run.json")))
    md = render_plan.markdown(plan, cmd, None, rerun_from="x")
    bmd = render_plan.markdown(benign, bcmd, None, rerun_from="x")
    markdown_like(md, bmd)
    fences = [line for line in md.splitlines() if line.startswith("```")]
    assert len(fences) == len([line for line in bmd.splitlines() if line.startswith("```")])
    strict_json(render_plan.to_json(plan, cmd, None, rerun_from="x"))


MARKUP = "[link=https://evil.example]n[/link][/x]"


def test_rich_markup_in_names_is_shown_not_interpreted():
    out = render_all(analysed(MARKUP, None, "b", "d"))["console"]
    assert MARKUP in out
    text = ci_render.text(comparison(MARKUP, MARKUP, MARKUP))
    assert MARKUP in text


@pytest.mark.parametrize("name", ["$\\foo{$", "x\x00y\x07", "\x1b[2Jz", "$x$ and $y"])
def test_figures_draw_any_name(name):
    from popviz import plot

    r = report(name, None, name, "d")
    figures = plot.figures(r, ["stages", "memory"])
    for fig in figures.values():
        assert not isinstance(fig, Exception), fig
        for fmt in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt)
            assert buf.getvalue()


def test_on_a_real_terminal_only_rich_colours_reach_the_screen(tmp_path):
    """``popviz analyse`` on a pseudo-terminal (rich draws in colour there): the names' OSC 52,
    window-title and clear-screen sequences never reach it; only rich's own SGR colours do."""
    import pty
    import subprocess
    import sys

    from popviz.sources.bundle import write_bundle

    name = "x\x1b]52;c;cm0gLXJmIH4=\x07y\x1b]0;pwned\x07\x1b[2J\x9b2J[link=https://e.x]z[/link]"
    write_bundle(testing.pipeline_report([1000, 3000], name=name, tiles_per_ipu=8), tmp_path / "r" / "e")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "popviz", "analyse", str(tmp_path / "r")], stdin=slave,
                            stdout=slave, stderr=slave, env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
                            close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=600) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[" in screen  # rich's colours: it did see a terminal
    assert "\x1b]" not in screen and "\x07" not in screen and "\x9b" not in screen
    assert "\x1b[2J" not in screen
    others = re.findall(r"\x1b(?!\[[0-9;?]*[A-Za-z])", screen)
    assert not others, others[:5]
    assert "[link=https://e.x]z[/link]" in screen.replace("\r", "")


def test_the_cli_streams_are_the_last_guard():
    """What slipped past the renderers (a message printed raw) still cannot reach the screen:
    escape sequences and control characters are removed from piped output, a line that would be
    a workflow command is defused, and popviz's own commands pass."""
    from popviz.cli import _PipeSafeStdout

    raw = io.StringIO()
    out = _PipeSafeStdout(raw)
    out.write("name \x1b]52;c;eA==\x07x\x1b[2J\x9b1m and \x00\r")
    out.write("\n")
    out.write("::warning::forged")
    out.write("\n  ::stop-commands::tok\nok :: fine\n")
    out.write_command("::error title=popviz regression::a%0Ab")
    out.close_lines()
    assert raw.getvalue() == ("name x and\n: :warning::forged\n  : :stop-commands::tok\nok :: fine\n"
                              "::error title=popviz regression::a%0Ab\n")


def test_the_older_command_form_is_defused_anywhere_in_a_line(tmp_path):
    """GitHub's runner also obeys ``##[error]data`` and ``##[stop-commands]token`` found anywhere
    in a line (actions/runner, src/Runner.Common/ActionCommand.cs, ``TryParse``: ``IndexOf("##[")``),
    so a name must not carry one to stdout or stderr in any form: plain, JSON, Markdown, --github."""
    from popviz.cli import _PipeSafeStdout
    from popviz.sources.bundle import write_bundle

    from conftest import run_cli

    raw = io.StringIO()
    out = _PipeSafeStdout(raw)
    out.write('{"name": "a ##[stop-commands]tok ###[error]x"}\n')
    out.close_lines()
    assert raw.getvalue() == '{"name": "a # #[stop-commands]tok ## #[error]x"}\n'

    name = "e ##[error]forged ##[stop-commands]tok"
    for side_, stage1 in (("base", 3000), ("new", 6000)):
        write_bundle(testing.pipeline_report([1000, stage1, 2000], name=name, tiles_per_ipu=8,
                                             gradient_accumulation=8), tmp_path / side_ / "e")
    summary = tmp_path / "summary.md"
    runs = {"analyse": ("analyse", "new"), "analyse --json": ("analyse", "--json", "new"),
            "check": ("check", "new", "--fail-on", "info"),
            "compare --github": ("compare", "base", "new", "--github")}
    for what, argv in runs.items():
        proc = run_cli(*argv, cwd=tmp_path, env={"GITHUB_STEP_SUMMARY": str(summary)})
        assert proc.returncode in (0, 1), (what, proc.stderr)
        assert "forged" in proc.stdout, what  # the name is shown ...
        assert "##[" not in proc.stdout + proc.stderr, what  # ... never as a command


def test_backticks_in_a_name_stay_text_in_markdown(tmp_path):
    from popviz.sources.bundle import write_bundle

    from conftest import run_cli

    write_bundle(testing.pipeline_report([1000, 1000, 1300, 900], name="N`q`"), tmp_path / "r" / "e")
    md = run_cli("analyse", str(tmp_path / "r"), "--markdown").stdout
    assert "N\\`q\\`" in md and "N`q`" not in md


def test_a_hostile_model_name_in_captures_own_lines(tmp_path):
    """The emulator's progress and capture's summary are written from inside the script's process
    and by the launcher, not through the CLI's guarded streams: a ``modelName`` or a command line
    with line breaks, ESC and workflow commands reaches the CI log as one defused line."""
    pytest.importorskip("torch")
    import sys

    from conftest import run_cli

    (tmp_path / "train.py").write_text(
        "import sys, torch, poptorch\n"
        "m = torch.nn.Linear(2, 2)\n"
        "o = poptorch.Options()\n"
        "o.modelName(sys.argv[1])\n"
        "poptorch.inferenceModel(m, o)(torch.zeros(1, 2))\n")
    name = "x\n::error ::evil\n##[warning]w\x1b[2J"
    proc = run_cli("capture", "-o", "out", "--emulate", "--", sys.executable, "train.py", name, cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert not [line for line in both.splitlines() if escape.is_command_line(line)], both
    assert "\x1b" not in both, both
    assert "estimated report of 'x\\n::error ::evil\\n# #[warning]w\\x1b[2J' written" in both
    finished = [line for line in both.splitlines() if "finished (exit code 0" in line]
    assert len(finished) == 1 and finished[0].startswith(f"popviz capture: {sys.executable} train.py")


def test_the_older_command_form_is_defused_before_a_line_is_measured():
    """Defused by the stream after rich laid the line out, ``##[`` grew by one column and pushed a
    panel's right border out of line; term defuses it first."""
    assert escape.term("s3\nx##[group]y") == "s3\ufffdx# #[group]y"
    from rich.cells import cell_len
    from rich.console import Console
    from rich.panel import Panel

    con = Console(file=io.StringIO(), width=40, force_terminal=False)
    con.print(Panel(escape.text("stage 3: s3\nx##[group]y")))
    out = escape.defuse_commands(con.file.getvalue())
    assert {cell_len(line) for line in out.splitlines()} == {40}


def test_markdown_escapes_an_ampersand_only_where_a_character_reference_could_start():
    """``sync & inter-IPU copies`` printed as ``sync &amp; inter-IPU copies`` in the raw Markdown
    (a reviewer); ``&amp;``, ``&#60;`` or ``&lt;`` from a file must still not become characters."""
    from popviz import escape

    assert escape.md("sync & inter-IPU copies") == "sync & inter-IPU copies"
    assert escape.md("a&") == "a&"
    assert escape.md("&amp; &#60; &lt;script&gt;") == "&amp;amp; &amp;#60; &amp;lt;script&amp;gt;"
