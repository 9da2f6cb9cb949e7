"""The environment ``popviz capture`` gives its child: Poplar's engine options merged with the
user's (the user's value kept and reported on a conflict), the bootstrap ``sitecustomize`` that
installs the hooks at interpreter start, the emulator's environment, the SDK version."""


from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from popviz.capture import hooks
from popviz.errors import MissingDependencyError, UsageError

BOOTSTRAP_PREFIX = "popviz-bootstrap-"
BOOTSTRAP_MARKER = "popviz-bootstrap.marker"
"""A file marking a bootstrap directory, so a bootstrap never chains another one."""
PVTI_ENV = "PVTI_OPTIONS"
ENGINE_OPTIONS_ENV = hooks.ENGINE_OPTIONS_ENV


# ------------------------------------------------------------------------------ options

def _truthy(value: Any) -> str:
    """Engine option values compare as Poplar reads them: strings, JSON true == "true"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip().lower() if isinstance(value, str) else json.dumps(value)


def parse_json_env(name: str, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The user's JSON object in ``env[name]`` (None when unset or blank), or a UsageError."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name} is not valid JSON ({exc.msg} at column {exc.colno}): fix or unset it; "
                         f"it is {raw[:60]!r}{'...' if len(raw) > 60 else ''}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{name} must be a JSON object like {{\"autoReport.all\": \"true\"}}, "
                         f"got {type(value).__name__}: fix or unset it")
    return value


def outer_options_removed(user: dict[str, Any] | None, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The user's engine options without those an outer ``popviz capture`` set (a capture run
    inside another: its options are popviz's, not the user's, and the inner capture's win)."""
    outer = env.get(hooks.ENV_DIR)
    if not user or not outer or str(user.get("autoReport.directory")) != outer:
        return user
    ours = engine_options(outer, None)
    return {k: v for k, v in user.items()
            if k not in ours and k != "autoReport.executionProfileProgramRunCount"} or None


def engine_options(report_dir: str, run_count: int | None) -> dict[str, str]:
    """The engine options popviz sets (values are strings, as Poplar reads them)."""
    opts = {"autoReport.all": "true", "autoReport.directory": report_dir,
            "debug.allowOutOfMemory": "true", "autoReport.outputSerializedGraph": "false"}
    if run_count is not None:
        opts["autoReport.executionProfileProgramRunCount"] = str(run_count)
    return opts


LWP_DEFAULT_FILTER = ".*"
"""``popviz capture --lwp`` without a pattern: every program gets an implicit block."""


def lwp_options(programs: str | None) -> dict[str, str]:
    """Poplar engine options that turn on Lightweight Profiling (graphcore/tutorials
    tutorials/popvision/lightweight_profiling/README.md @ b7ffa4d): an implicit ``Block`` around
    every program whose name matches ``programs`` (``profiler.programs.filter``; PopTorch adds no
    ``Block`` programs of its own for ``profiler.blocks.filter`` to select) and instrumented
    stream copies (``debug.instrumentExternalExchange``). Nothing when ``programs`` is None."""
    if programs is None:
        return {}
    return {"profiler.programs.filter": programs, "debug.instrumentExternalExchange": "true"}


def merge_options(user: Mapping[str, Any] | None, ours: Mapping[str, Any]
                  ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``user`` merged with ``ours``: on a conflict the user's value is kept and reported."""
    merged = dict(ours)
    conflicts = []
    for key, value in (user or {}).items():
        if key in ours and _truthy(value) != _truthy(ours[key]):
            conflicts.append({"key": key, "kept": value, "popviz_wanted": ours[key]})
        merged[key] = value
    return merged, conflicts


def conflict_message(name: str, conflict: Mapping[str, Any]) -> str:
    key, kept, wanted = conflict["key"], conflict["kept"], conflict["popviz_wanted"]
    effect = {
        "autoReport.directory": "Poplar's profiles go there, popviz's records stay in the run directory",
        "autoReport.all": "profiling may be off: expect no profile.pop",
    }.get(key, "kept as you set it")
    return f"your {name} sets {key}={json.dumps(kept)} (popviz would set {json.dumps(wanted)}): {effect}"


# ------------------------------------------------------------------------------ child environment

BOOTSTRAP = '''\
"""Written by popviz capture for one run (removed when it ends): chain the next sitecustomize,
then install popviz's PopTorch hooks."""


def _popviz_bootstrap():
    import os
    import sys

    try:
        import importlib.machinery
        import importlib.util

        # Skip every popviz bootstrap (this one, and an outer capture's in a nested one).
        path = [p for p in sys.path
                if not os.path.exists(os.path.join(p or os.curdir, "popviz-bootstrap.marker"))]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    except Exception as exc:
        print("Error in sitecustomize; set PYTHONVERBOSE for traceback:", file=sys.stderr)
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    try:
        from popviz.capture import patching

        patching.install_from_env()
    except Exception as exc:
        print(f"popviz capture: hooks not installed in this process ({type(exc).__name__}: {exc}); "
              "profiles are still written, without popviz-model.json", file=sys.stderr)


_popviz_bootstrap()
del _popviz_bootstrap
'''


def clean_stale_bootstraps(parent: str | None = None) -> list[str]:
    """Remove bootstrap directories left by a popviz that was killed (its pid, in the name, is no
    longer running); return their names. Others' and running captures' are left alone."""
    from popviz.sources.runrecord import pid_alive

    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(BOOTSTRAP_PREFIX):
            continue
        pid = name[len(BOOTSTRAP_PREFIX):].split("-", 1)[0]
        path = os.path.join(parent, name)
        if not pid.isdigit() or not os.path.isfile(os.path.join(path, BOOTSTRAP_MARKER)):
            continue
        if pid_alive(int(pid), socket.gethostname()) is False:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


def make_bootstrap() -> Path:
    """A temporary directory with the bootstrap ``sitecustomize.py`` and a link to this popviz
    package, so the child imports the same popviz whatever its environment holds."""
    clean_stale_bootstraps()
    directory = Path(tempfile.mkdtemp(prefix=f"{BOOTSTRAP_PREFIX}{os.getpid()}-"))
    (directory / "sitecustomize.py").write_text(BOOTSTRAP, encoding="utf-8")
    (directory / BOOTSTRAP_MARKER).write_text("popviz capture bootstrap\n", encoding="utf-8")
    package = Path(__file__).resolve().parent.parent
    try:
        (directory / "popviz").symlink_to(package, target_is_directory=True)
    except OSError:
        shutil.copytree(package, directory / "popviz",
                        ignore=shutil.ignore_patterns("__pycache__"))
    return directory


def prepend_path(env: dict[str, str], key: str, entry: str) -> None:
    rest = env.get(key)
    env[key] = entry + (os.pathsep + rest if rest else "")


def emulated(env: dict[str, str]) -> dict[str, str]:
    """``env`` in which ``import poptorch`` gets popviz's emulator."""
    try:
        from popviz.emulator.launch import emulated_env
    except ImportError as exc:
        raise MissingDependencyError(f"--emulate needs popviz's emulator, which cannot be imported "
                                     f"({exc}); install popviz with the emulator "
                                     "(pip install 'popviz[emulate]')") from None
    return dict(emulated_env(env))


def sdk_versions(env: Mapping[str, str]) -> dict[str, str]:
    """The Poplar SDK version from its environment (``POPLAR_SDK_ENABLED`` names its folder)."""
    out = {}
    for key in ("POPLAR_SDK_ENABLED", "POPLAR_ROOT", "POPLAR_INSTALL_DIR"):
        value = env.get(key)
        if value:
            match = re.search(r"(\d+\.\d+\.\d+)", Path(value).name) or re.search(r"(\d+\.\d+\.\d+)", value)
            if match:
                out["poplar_sdk"] = match.group(1)
                out["poplar_sdk_path"] = value
                break
    return out
