from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_reports"
FAKE_PVA = Path(__file__).resolve().parent / "fake_pva"


# A suite started in the background by a non-interactive shell (`nohup ... &`, some CI runners)
# inherits SIGINT ignored, and an ignored signal stays ignored across exec: the commands the tests
# start (and their children) would then ignore the Ctrl-C the signal tests send. Python's own
# handler here is reset to the default action in every process started from this one.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

HANG_GUARD_SECONDS = 900
"""How long a test lets a popviz command run before calling it hung (not a speed limit); scaled
by :func:`hang_guard`."""

TIMEOUT_SCALE_ENV = "POPVIZ_TEST_TIMEOUT_SCALE"
"""Multiplies every hang guard (subprocess timeouts, waits, pytest-timeout's per-test limit)."""


def timeout_scale() -> float:
    """How much longer than their nominal seconds the hang guards wait: POPVIZ_TEST_TIMEOUT_SCALE
    when set, else the 1-minute load per core when it is over 1 (at load 10 on 2 cores every
    command runs about 5 times slower than on an idle machine, and so may its guard)."""
    explicit = os.environ.get(TIMEOUT_SCALE_ENV)
    if explicit:
        return max(float(explicit), 0.01)
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 1.0
    return max(1.0, per_core)


def hang_guard(seconds: float) -> float:
    """A wall-clock limit for a hang, never for speed: ``seconds`` (generous on an idle machine)
    times :func:`timeout_scale`, read when the guard is set."""
    return seconds * timeout_scale()


def hang_guard_message(what: str, seconds: float) -> str:
    """The failure text of a guard that ran out: it says it is a hang guard and how to widen it."""
    return (f"hang guard: {what} still running after {seconds:.0f} s (a limit for hangs, not for speed: "
            f"is it stuck? On a loaded machine set {TIMEOUT_SCALE_ENV} to wait longer)")


def run_cli(*args: str, cwd: str | Path | None = None, env: dict[str, str] | None = None,
            timeout: float = HANG_GUARD_SECONDS) -> subprocess.CompletedProcess[str]:
    """Run the real CLI (``python -m popviz``) in a subprocess. ``timeout`` guards against a
    hang only (generous, and scaled by :func:`hang_guard`: a loaded 2-core machine runs a command
    many times slower than an idle one); reaching it fails the test saying so."""
    full_env = {**os.environ, "COLUMNS": "100", **(env or {})}
    timeout = hang_guard(timeout)
    try:
        return subprocess.run([sys.executable, "-m", "popviz", *args], cwd=cwd, env=full_env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(hang_guard_message(f"popviz {' '.join(map(str, args))}", timeout), pytrace=False)


def unwrapped(text: str) -> str:
    """``text`` with the lines popviz broke to fit the terminal joined again (a wrapped line's
    continuations are indented four columns more, a command's lines end in `` \\``:
    ``popviz.ui.wrap_line``, ``wrap_command``, ``wrap_code``)."""
    import re

    return re.sub(r"( \\)?\n(\s*)    (?=\S)", " ", text)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, exactly one message on stderr (its line wrapped at the terminal's width) naming
    what it must, no traceback; returns it on one line."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in unwrapped(proc.stderr.strip()).splitlines()
             if line not in ("popviz plot: reading the report and drawing its figures ...",
                             "popviz analyse: reading the report and writing the page ...")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="session")
def mnist_capture(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``popviz capture -o out --emulate`` of examples/mnist_pipeline.py for two training steps
    (of its ten: the same engines, options and per-call figures in a fifth of the time), made
    once per test process and shared: tests read it and write elsewhere. Returns the run
    directory and the finished capture."""
    tmp = tmp_path_factory.mktemp("mnist")
    proc = run_cli("capture", "-o", "out", "--emulate", "--", sys.executable, str(ROOT / "examples" / "mnist_pipeline.py"),
                   "--steps", "2", cwd=tmp, env={"OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out", proc


@pytest.fixture
def fake_pva_env() -> dict[str, str]:
    """Environment in which ``import pva`` finds the test double in tests/fake_pva."""
    return {"PYTHONPATH": os.pathsep.join([str(FAKE_PVA), os.environ.get("PYTHONPATH", "")])}


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: pytest-timeout may be absent
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's per-test limit (pyproject's ``timeout``, a test's ``@pytest.mark.timeout``)
    is a hang guard too: scaled by :func:`hang_guard` when each test starts (the load then, not
    the session's start), then set by the plugin's own implementation."""
    import pytest_timeout

    return pytest_timeout.pytest_timeout_set_timer(item, settings._replace(timeout=hang_guard(settings.timeout)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test stopped by a wall-clock limit (pytest-timeout, or a subprocess ``timeout=``) says
    that the limit is a hang guard, not a speed requirement, and how to widen it."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.excinfo is None:
        return
    if call.excinfo.errisinstance(subprocess.TimeoutExpired):
        what, seconds = "a command the test ran", call.excinfo.value.timeout
    elif "from pytest-timeout" in str(call.excinfo.value):
        what, seconds = "the test", call.duration
    else:
        return
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection("hang guard", f"{hang_guard_message(what, seconds)}; the scale is now "
                                                 f"{timeout_scale():.2f}")


def pytest_addoption(parser) -> None:
    parser.addoption("--run-long", action="store_true", default=False,
                     help="also run the benchmark-like lengths of the slow tests: the captured samples "
                          "regenerated with every call run on the CPU (tens of CPU-minutes; CI runs the same "
                          "checks with smaller cases)")


RUN_APART = (
    "tests/test_samples_captured.py::test_regenerating_a_sample_gives_the_same_analysis",
    "tests/test_emulator_fake_samples.py::",
    "tests/test_emulator_workers.py::test_a_64_worker_estimate_stays_bounded_and_leaves_no_process",
    "tests/test_plan_recapture.py::",
    "tests/test_fidelity.py::",
)
"""Long tests (minutes of emulated captures each) that share no module-scoped fixture: under
pytest-xdist each is a work unit of its own, so the cases of one module run on both workers."""

RUN_FIRST = (
    "tests/test_new_user.py",
    "tests/test_instances.py",
    "tests/test_emulator_fake_samples.py::test_whole_runs",
    "tests/test_ci_pytest_plugin.py",
    "tests/test_emulator_report_writer.py",
    "tests/test_real_client_fixes.py",
    "tests/test_capture_emulated.py",
    "tests/test_emulator_reports.py",
    "tests/test_emulator_fake_samples.py",
    "tests/test_never_called.py",
    "tests/test_ci_end_to_end.py",
    "tests/test_terminal_width.py",
    "tests/test_ci_history_docs.py",
    "tests/test_fidelity.py",
    "tests/test_history_pytest_plugin.py",
    "tests/test_plan_recapture.py",
    "tests/test_samples_captured.py::test_regenerating",
    "tests/test_emulator_workers.py::test_a_64",
)
"""The longest work units, handed out first, longest first (by the --durations of a full run at
load 6): pytest-xdist's loadscope orders modules by their number of tests, which put these
few-test, minutes-long ones last, and one worker then ran them alone while the other had
finished (the run's tail)."""


@pytest.hookimpl(optionalhook=True)  # optional: `pytest -p no:xdist` runs without pytest-xdist
def pytest_xdist_make_scheduler(config, log):
    """loadscope (a module's tests on one worker, its module fixtures made once) with the
    :data:`RUN_APART` tests split into units of their own and the :data:`RUN_FIRST` units first."""
    from xdist.scheduler import LoadScopeScheduling

    if config.getoption("dist") != "loadscope":
        return None

    class LongFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(RUN_APART):
                return nodeid
            return super()._split_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_ordered", False):  # the queue is complete at the first assignment
                self._ordered = True

                def rank(scope: str) -> int:
                    return next((i for i, p in enumerate(RUN_FIRST) if scope.startswith(p)), len(RUN_FIRST))

                units = sorted(self.workqueue.items(), key=lambda unit: rank(unit[0]))  # stable: the rest keep theirs
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return LongFirst(config, log)
