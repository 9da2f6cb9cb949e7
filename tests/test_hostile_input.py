"""Hostile and impossible input: the malformed-input corpus (tests/corpus/make_corpus.py) through
the real CLI in every output mode and through popviz.load(); export containment; path display."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from corpus.make_corpus import CASES, make

import popviz
from popviz import escape
from popviz.errors import PopvizError, shown

from conftest import assert_one_line_error, run_cli, unwrapped

MODES = ((), ("--json",), ("--markdown",))

DRIVER = r"""
import contextlib, io, json, sys
from popviz.cli import main
out = {}
for case, mode in json.loads(sys.argv[1]):
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            code = main(["analyse", case, *mode])
        except SystemExit as exc:
            code = exc.code
    out[case + " " + " ".join(mode)] = [code, o.getvalue(), e.getvalue()]
print(json.dumps(out))
"""


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (not following links) -> its content hash or link target."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                seen[rel] = "-> " + os.readlink(p)
            elif p.is_fifo():
                seen[rel] = "fifo"
            elif p.is_file():
                seen[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                seen[rel] = "dir"
    return seen


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("corpus")
    return root, make(root)


@pytest.fixture(scope="module")
def cli_results(corpus, tmp_path_factory) -> tuple[dict, dict, dict, Path]:
    """Every case in every output mode through popviz.cli.main in one real process (cwd an empty
    directory), with snapshots of the corpus and the cwd before and after."""
    root, expected = corpus
    cwd = tmp_path_factory.mktemp("cwd")
    before = snapshot(root)
    jobs = [[str(root / case), list(mode)] for case in expected for mode in MODES]
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(jobs)], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), before, snapshot(root), cwd


def test_the_corpus_has_every_case_of_the_issue():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", sorted(CASES))
def test_corpus_case_through_every_output_mode(case, corpus, cli_results):
    root, expected = corpus
    results = cli_results[0]
    want = expected[case]
    for mode in MODES:
        code, out, err = results[str(root / case) + " " + " ".join(mode)]
        assert "Traceback" not in out + err
        assert "internal error" not in err
        if want["outcome"] == "error":
            assert code == 2, (mode, code, out, err)
            assert out == ""
            lines = unwrapped(err.strip()).splitlines()  # one message, wrapped at the width
            assert len(lines) == 1, err
            for needle in want["needles"]:
                assert needle in lines[0], (needle, lines[0])
        else:
            assert code == 0, (mode, code, err)
            if mode == ("--json",):
                doc = json.loads(out)
                assert doc["engines"]
            for needle in want["needles"]:
                # Markdown shows names as written by escaping them ([bold] is \[bold\] there)
                shown = escape.md(needle) if mode == ("--markdown",) else needle
                assert shown in out, (mode, needle)


@pytest.mark.parametrize("case", sorted(CASES))
def test_corpus_case_through_load(case, corpus):
    root, expected = corpus
    want = expected[case]
    if want["outcome"] == "error":
        with pytest.raises(PopvizError) as info:
            popviz.load(root / case)
        for needle in want["needles"]:
            assert needle in info.value.message
    else:
        assert len(popviz.load(root / case)) == 1


def test_input_and_working_directories_are_unchanged(cli_results):
    _, before, after, cwd = cli_results
    assert after == before
    assert list(cwd.iterdir()) == []


def test_markup_in_names_through_the_real_console(corpus):
    root, _ = corpus
    proc = run_cli("analyse", str(root / "markup_in_names"), env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert "[bold]eng[/bold]" in proc.stdout and "[/link]x" in proc.stdout


def test_deep_json_through_the_real_cli(corpus):
    root, _ = corpus
    assert_one_line_error(run_cli("analyse", "--json", str(root / "deep_json")),
                          "popviz-report.json", "deeply")


# ------------------------------------------------------------------------------- containment

@pytest.mark.parametrize("name", ["../../victim", "/abs/victim", "..", ".hidden", "a\\b", "x\0y"])
def test_export_refuses_engine_names_that_would_escape(tmp_path, name):
    from corpus.make_corpus import _base, _edit_meta

    src = _base(tmp_path / "in" / "eng")
    _edit_meta(src, lambda m: m.update(name=name))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "memory.parquet").write_text("mine")
    out = tmp_path / "out" / "deep"
    proc = run_cli("export", str(src), "-o", str(out), cwd=tmp_path)
    assert_one_line_error(proc, "engine name", "popviz-report.json")
    assert (victim / "memory.parquet").read_text() == "mine"
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "victim"]


def test_export_of_a_clean_report_writes_only_under_out(tmp_path):
    from corpus.make_corpus import _base

    src = _base(tmp_path / "in" / "training")
    out = tmp_path / "out"
    proc = run_cli("export", str(src), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]
    assert sorted(p.name for p in (out / "training").iterdir()) == [
        "execution.parquet", "memory.parquet", "popviz-report.json", "runs.parquet"]
    again = run_cli("export", str(src), "-o", str(out), cwd=tmp_path)
    assert_one_line_error(again, "already exists")


def test_shown_never_raises_on_symlink_loops(tmp_path):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    assert shown(loop).endswith("loop")
    a, b = tmp_path / "a", tmp_path / "b"
    os.symlink(b, a)
    os.symlink(a, b)
    assert shown(a / "x").endswith("x")


def test_an_unlistable_engine_directory_is_an_error(tmp_path, monkeypatch):
    """Root reads every directory, so make listing fail the way EACCES does."""
    from corpus.make_corpus import _base

    from popviz.sources import discover

    _base(tmp_path / "run" / "a")
    (tmp_path / "run" / "b").mkdir()
    real_scandir = os.scandir

    def scandir(path="."):
        if str(path).endswith("/b"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(PopvizError, match=r"run/b: cannot be read \(Permission denied\)"):
        discover.load(tmp_path / "run")
