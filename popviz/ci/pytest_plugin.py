"""popviz's pytest plugin: capture the PopTorch executors a test creates, check budgets and compare
with a baseline committed beside the test (registered through the ``pytest11`` entry point, so
``pip install popviz`` is enough). docs/pytest.md.

* fixture ``popviz_capture``: the executors the test creates are captured (``popviz.capture``
  into a temporary directory); ``popviz_capture.reports()`` returns their Reports,
  ``.assert_budgets({...})`` and ``.assert_baseline()`` fail the test with popviz compare's table;
* marker ``@pytest.mark.popviz(budgets={...}, baseline=True, fail=[...])``: the same checks, run
  after the test body passes;
* ``--popviz-update-baselines``: write (or rewrite) the baselines instead of comparing;
* ``--popviz-emulate`` (or ini ``popviz_emulate = true``): when PopTorch is not installed, tests
  import popviz's CPU emulator as ``poptorch`` and get estimated reports.

Importing this module is cheap (pytest imports it in every session where popviz is installed):
popviz's own modules load when a test uses the fixture or the marker.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from popviz.ci.baseline import EngineMetrics
    from popviz.ci.compare import Comparison
    from popviz.ci.thresholds import Config
    from popviz.model import ReportSet

BASELINES_DIR = "popviz_baselines"
"""Default directory, beside the test file, of the committed baselines (ini ``popviz_baselines_dir``)."""
_CAPTURE = pytest.StashKey["PopvizCapture"]()
_UPDATED = pytest.StashKey[list]()
T = TypeVar("T")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("popviz", "popviz performance checks")
    group.addoption("--popviz-update-baselines", action="store_true", default=False,
                    help="write the popviz baselines of the tests that compare with one, instead of comparing")
    group.addoption("--popviz-emulate", action="store_true", default=False,
                    help="when PopTorch is not installed, run tests' PopTorch code on popviz's CPU emulator "
                    "(estimated reports)")
    parser.addini("popviz_emulate", type="bool", default=False,
                  help="as --popviz-emulate: use popviz's emulator as poptorch when PopTorch is not installed")
    parser.addini("popviz_baselines_dir", default=BASELINES_DIR,
                  help="directory beside each test file holding its popviz baselines (popviz_baselines)")
    group.addoption("--popviz-history", metavar="DB", default=None,
                    help="the history assert_history() compares with: a SQLite file or a postgresql:// URL")
    group.addoption("--popviz-history-add", action="store_true", default=False,
                    help="assert_history() also appends each test's run to the history (on the main branch)")
    parser.addini("popviz_history", default="", help="as --popviz-history: the history assert_history() uses")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "popviz(budgets=None, baseline=False, fail=(), allow_mixed=False): capture the PopTorch "
        "executors the test creates and, after it passes, check budgets ({METRIC: '<= LIMIT'}) and compare "
        "with its committed baseline (docs/pytest.md)")
    config.stash[_UPDATED] = []
    if config.getoption("popviz_emulate") or config.getini("popviz_emulate"):
        _use_emulator()


def _use_emulator() -> None:
    """Make ``import poptorch`` find popviz's emulator, unless a real PopTorch is installed (then it
    is used: the reports are measured). Subprocesses the tests start inherit it via PYTHONPATH."""
    if "poptorch" in sys.modules or importlib.util.find_spec("poptorch") is not None:
        return
    from popviz.emulator.launch import SHIM_DIR, emulated_env

    sys.path.insert(0, str(SHIM_DIR))
    os.environ["PYTHONPATH"] = emulated_env(os.environ)["PYTHONPATH"]


class PopvizCapture:
    """What the ``popviz_capture`` fixture gives a test."""

    def __init__(self, run: Any, request: pytest.FixtureRequest) -> None:
        self._run = run
        self._request = request
        self.dir: Path = Path(run.dir)
        """Where the executors' reports are written."""

    # ------------------------------------------------------------------------------ reading

    def reports(self) -> ReportSet:
        """The Reports of the executors created so far (one per engine)."""
        from popviz.errors import PopvizError

        emulator = sys.modules.get("popviz.emulator.profiling")
        if emulator is not None:
            emulator.write_all()
        try:
            return self._run.load()
        except PopvizError as exc:
            message = exc.message
        from popviz.escape import term

        pytest.fail(f"popviz: no report to check: {term(message)}", pytrace=False)

    def metrics(self) -> list[EngineMetrics]:
        """The engines' CI metrics (docs/ci.md), as popviz baseline save records them."""
        from popviz.ci.baseline import from_reports

        self.reports()  # flushes and fails readably when nothing was captured
        return _guard(lambda: from_reports(self.dir))

    # ---------------------------------------------------------------------------- checking

    def assert_budgets(self, budgets: Mapping[str, str] | None = None) -> Comparison:
        """Fail the test when a metric breaks a budget: ``{"memory.*.used_pct": "<= 85"}``;
        ``None`` uses ``[tool.popviz.budgets]`` of the project's pyproject.toml."""
        from popviz.ci.compare import Comparison, check_budgets
        from popviz.ci.thresholds import parse_budget

        parsed = _guard(lambda: [parse_budget(k, v, "the test's budgets") for k, v in (budgets or {}).items()])
        if budgets is None:
            parsed = self._config().budgets
            if not parsed:
                pytest.fail("popviz: assert_budgets() without budgets, and no [tool.popviz.budgets] in "
                            f"{self._request.config.rootpath / 'pyproject.toml'}", pytrace=False)
        metrics = self.metrics()
        c = Comparison(budgets=_guard(lambda: check_budgets(metrics, parsed)))  # a typo: one line, not a traceback
        _fail_if(c)
        return c

    def assert_baseline(self, name: str | None = None, *, fail: Sequence[str] = (),
                        allow_mixed: bool = False) -> Comparison | None:
        """Compare with the baseline committed beside the test (``popviz_baselines/<module>.<test>.json``);
        fail with popviz compare's table on a regression. ``fail`` adds thresholds
        (``"pipeline.imbalance_ratio:5%"``) after ``[tool.popviz.fail]``. With
        ``--popviz-update-baselines`` the baseline is written instead (returns None)."""
        from popviz.ci import baseline
        from popviz.ci.compare import compare
        from popviz.ci.thresholds import parse_rule

        path = self.baseline_path(name)
        engines = self.metrics()
        config = self._request.config
        if config.getoption("popviz_update_baselines"):
            import json

            from popviz.fileio import atomic_write_bytes

            path.parent.mkdir(parents=True, exist_ok=True)
            doc = baseline.document(engines, self._request.node.nodeid)
            atomic_write_bytes(path, (json.dumps(doc, indent=1) + "\n").encode())
            config.stash[_UPDATED].append(str(path))
            return None
        if not path.is_file():
            pytest.fail(f"popviz: no baseline {_rel(path, config)}; run pytest --popviz-update-baselines to "
                        "write it, then commit it", pytrace=False)
        base = _guard(lambda: baseline.read(path))
        rules = [*self._config().fail, *_guard(lambda: [parse_rule(r, "the test's fail") for r in fail])]
        c = _guard(lambda: compare(base, engines, rules, allow_mixed=allow_mixed))
        _fail_if(c)
        return c

    def assert_history(self, db: str | None = None, *, last: int = 5, fail: Sequence[str] = (),
                       add: bool | None = None, label: str | None = None,
                       allow_mixed: bool = False) -> Comparison | None:
        """Compare with the median of this test's last ``last`` runs in a history, as ``popviz
        compare --against-history`` does; fail with its table on a regression. ``db``: a SQLite
        file or a ``postgresql://`` URL (default ``--popviz-history`` or ini ``popviz_history``).
        The test's engines are kept under the test's id, so one history holds every test's runs.
        With ``add`` (default ``--popviz-history-add``) the run is appended afterwards, labelled
        ``label`` or ``$POPVIZ_HISTORY_LABEL``. A history without this test's runs yet passes."""
        import dataclasses

        from popviz.ci import history
        from popviz.ci.compare import compare
        from popviz.ci.thresholds import parse_rule

        config = self._request.config
        where = db or config.getoption("popviz_history") or config.getini("popviz_history")
        if not where:
            pytest.fail("popviz: assert_history() needs a history: pass db=, --popviz-history DB or set ini "
                        "popviz_history", pytrace=False)
        test_id = self._request.node.nodeid
        engines = [dataclasses.replace(e, instance=f"{test_id}::{e.instance}" if e.instance else test_id)
                   for e in self.metrics()]
        ours = {e.label for e in engines}
        c = None
        base = self._history_base(where, last, allow_mixed, ours)
        if base:
            rules = [*self._config().fail, *_guard(lambda: [parse_rule(r, "the test's fail") for r in fail])]
            c = _guard(lambda: compare(base, engines, rules, allow_mixed=allow_mixed))
        if add if add is not None else config.getoption("popviz_history_add"):
            _guard(lambda: history.add(where, engines, label=label or os.environ.get("POPVIZ_HISTORY_LABEL") or None,
                                       source=test_id))
        if c is not None:
            _fail_if(c)
        return c

    @staticmethod
    def _history_base(db: str, last: int, allow_mixed: bool, ours: set[str]) -> list[EngineMetrics]:
        """This test's engines from the median of the history's last runs ([] before its first run)."""
        from popviz.ci import history
        from popviz.ci.history_store import is_url
        from popviz.errors import PopvizError
        from popviz.escape import term

        if not is_url(db) and not Path(db).exists():
            return []
        try:
            median = history.median_side(db, last, allow_mixed=allow_mixed)
        except PopvizError as exc:
            if "holds no runs yet" in exc.message:
                return []
            message = exc.message
        else:
            message = None
        if message is not None:
            pytest.fail(f"popviz: {term(message)}", pytrace=False)
        return [e for e in median.engines if e.label in ours]

    def baseline_path(self, name: str | None = None) -> Path:
        """``<test dir>/popviz_baselines/<name>.json``; by default the name is the test's module and
        name (``test_model.test_training``, parameters included)."""
        node = self._request.node
        stem = name or re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{Path(str(node.path)).stem}.{node.name}").strip("_")
        if not stem.endswith(".json"):
            stem += ".json"
        directory = Path(str(node.path)).parent / self._request.config.getini("popviz_baselines_dir")
        return directory / stem

    def _config(self) -> Config:
        from popviz.ci.thresholds import load_config

        return _guard(lambda: load_config(cwd=Path(self._request.config.rootpath)))

    def _check_marker(self, marker: pytest.Mark) -> None:
        unknown = set(marker.kwargs) - {"budgets", "baseline", "fail", "allow_mixed", "history"}
        if unknown or marker.args:
            pytest.fail(f"@pytest.mark.popviz takes budgets=, baseline=, history=, fail=, allow_mixed= keywords, not "
                        f"{', '.join(sorted(unknown)) or repr(marker.args)}", pytrace=False)
        budgets = marker.kwargs.get("budgets")
        if budgets is not None:
            self.assert_budgets(budgets)
        wanted = marker.kwargs.get("baseline", False)
        if wanted:
            self.assert_baseline(wanted if isinstance(wanted, str) else None, fail=marker.kwargs.get("fail", ()),
                                 allow_mixed=bool(marker.kwargs.get("allow_mixed", False)))
        kept = marker.kwargs.get("history", False)
        if kept:  # True: the --popviz-history DB; a string: that DB
            self.assert_history(kept if isinstance(kept, str) else None, fail=marker.kwargs.get("fail", ()),
                                allow_mixed=bool(marker.kwargs.get("allow_mixed", False)))


def _guard(fn: Callable[[], T]) -> T:
    """``fn()``; a popviz error becomes a one-line test failure."""
    from popviz.errors import PopvizError

    try:
        return fn()
    except PopvizError as exc:
        message = exc.message  # failed outside the handler: no "during handling..." chain
    from popviz.escape import term

    pytest.fail(f"popviz: {term(message)}", pytrace=False)


def _fail_if(c: Comparison) -> None:
    if c.failed:
        from popviz.ci.render import text

        pytest.fail(text(c), pytrace=False)


def _rel(path: Path, config: pytest.Config) -> str:
    try:
        return str(path.relative_to(config.rootpath))
    except ValueError:
        return str(path)


@pytest.fixture
def popviz_capture(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PopvizCapture]:
    """Capture the PopTorch executors this test creates; see :class:`PopvizCapture`."""
    from popviz.capture.api import capture

    directory = tmp_path_factory.mktemp("popviz", numbered=True)
    with capture(directory) as run:
        cap = PopvizCapture(run, request)
        request.node.stash[_CAPTURE] = cap
        yield cap


@pytest.fixture(autouse=True)
def _popviz_marked(request: pytest.FixtureRequest) -> None:
    """A test marked ``@pytest.mark.popviz`` gets ``popviz_capture`` without asking for it."""
    if request.node.get_closest_marker("popviz") is not None:
        request.getfixturevalue("popviz_capture")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield  # the test body; if it failed, there is nothing to check
    marker = item.get_closest_marker("popviz")
    cap = item.stash.get(_CAPTURE, None)
    if marker is not None and cap is not None:
        cap._check_marker(marker)
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand the baselines it wrote to the controller, which lists them."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["popviz_updated"] = list(session.config.stash.get(_UPDATED, []))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist's controller: collect what each worker wrote (see pytest_sessionfinish)."""
    written = getattr(node, "workeroutput", {}).get("popviz_updated", [])
    node.config.stash.setdefault(_UPDATED, []).extend(p for p in written if isinstance(p, str))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    updated = sorted(set(config.stash.get(_UPDATED, [])))
    if updated:
        terminalreporter.write_line(f"popviz: wrote {len(updated)} baseline(s); commit them:")
        for path in updated:
            terminalreporter.write_line(f"  {_rel(Path(path), config)}")
