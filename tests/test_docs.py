"""Generated documentation stays in sync: the CLI reference and the README's output excerpts."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def _tool(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "tools" / name), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_cli_reference_matches_the_parser():
    proc = _tool("cli_reference.py")
    assert proc.returncode == 0, proc.stderr


def test_readme_excerpts_match_what_popviz_prints():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "<!-- excerpt: popviz " in readme, "the README shows real popviz output"
    proc = _tool("readme_excerpt.py")
    assert proc.returncode == 0, proc.stderr


def test_findings_page_covers_every_finding_code():
    """docs/findings.md has a row for every code an analysis can emit (codes are string literals
    such as "MEM001" in popviz/analysis)."""
    import re

    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "popviz" / "analysis").rglob("*.py"))
    codes = set(re.findall(r'"([A-Z]{3,5}\d{3})"', source))
    assert {"PIPE001", "MEM005", "HIO003", "INST005"} <= codes
    page = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([A-Z]{3,5}\d{3})` \|", page, flags=re.MULTILINE))
    assert sorted(codes - rows) == []
