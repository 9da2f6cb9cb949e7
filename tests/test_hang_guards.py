"""The suite's wall-clock limits are hang guards (tests/conftest.py): scaled by
POPVIZ_TEST_TIMEOUT_SCALE or the load, and a test stopped by one says so."""

from __future__ import annotations

from pathlib import Path

import conftest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).resolve().parent / "conftest.py").read_text(encoding="utf-8")


def test_the_scale_is_the_variable_or_the_load_per_core(monkeypatch):
    monkeypatch.setenv(conftest.TIMEOUT_SCALE_ENV, "3")
    assert conftest.timeout_scale() == 3.0 and conftest.hang_guard(600) == 1800.0
    monkeypatch.delenv(conftest.TIMEOUT_SCALE_ENV)
    monkeypatch.setattr(conftest.os, "getloadavg", lambda: (10.0, 8.0, 6.0))
    monkeypatch.setattr(conftest.os, "cpu_count", lambda: 2)
    assert conftest.hang_guard(120) == 600.0  # load 10 on 2 cores: five times as long
    monkeypatch.setattr(conftest.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert conftest.hang_guard(120) == 120.0  # never shorter than written


def test_a_guard_that_runs_out_says_it_is_a_hang_guard(pytester, monkeypatch):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_stuck='''
        import subprocess, sys, time
        import pytest

        def test_command():
            subprocess.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)

        @pytest.mark.timeout(1)
        def test_itself():
            time.sleep(60)
    ''')
    monkeypatch.setenv(conftest.TIMEOUT_SCALE_ENV, "2")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    # the subprocess's own timeout is the test's (scaled only where tests call hang_guard);
    # pytest-timeout's is scaled: 1 s written, 2 s waited
    assert "hang guard: a command the test ran still running after 1 s (a limit for hangs, not for speed" in out
    assert "Timeout (>2.0s) from pytest-timeout." in out
    assert "hang guard: the test still running after 2 s" in out
    assert f"set {conftest.TIMEOUT_SCALE_ENV} to wait longer); the scale is now 2.00" in out
