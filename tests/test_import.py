import subprocess
import sys


def test_import_popviz_is_light():
    code = ("import sys, popviz; heavy = [m for m in ('torch', 'matplotlib', 'pandas', 'pyarrow', "
            "'rich', 'numpy', 'pva', 'poptorch') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cli_analyse_does_not_import_torch_or_matplotlib():
    code = ("import sys; from popviz.cli import main; rc = main(['analyse', 'sample_reports/bert_pipeline', "
            "'--json']); print([m for m in ('torch', 'matplotlib') if m in sys.modules], file=sys.stderr)")
    from conftest import ROOT

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "[]"
