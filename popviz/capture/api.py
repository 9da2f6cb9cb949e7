"""The in-process capture API: ``with popviz.capture(dir): ...`` and ``popviz.wrap(executor)``.

Both are idempotent: a ``popviz.capture`` inside another (or inside a program run by
``popviz capture``) joins the capture already running, and wrapping a wrapped executor returns
it unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popviz._version import __version__
from popviz.capture import childenv, hooks, patching, rundir, snapshot
from popviz.capture import launcher as L
from popviz.errors import UsageError

if TYPE_CHECKING:
    from popviz.model import ReportSet


@dataclass(frozen=True)
class CaptureRun:
    """The capture a ``with popviz.capture(...)`` block records into."""

    dir: Path
    """The run directory, absolute (``<dir>/<engine>/`` holds each engine's report)."""
    joined: bool = False
    """True when this block joined a capture already running (nested, or under popviz capture)."""

    def load(self) -> ReportSet:
        """The engines captured so far, as :func:`popviz.load` reads them."""
        from popviz.sources.discover import load

        patching.flush()
        return load(self.dir)


def _warn(message: str) -> None:
    from popviz.ui import say

    say(f"popviz: {message}")


@contextlib.contextmanager
def capture(report_dir: str | os.PathLike[str] | None = None, *, new_run: bool = False,
            run_count: int | None = None, pvti: bool = False) -> Iterator[CaptureRun]:
    """Capture the PopTorch executors created inside the block (see :func:`popviz.capture`)."""
    if hooks.STATE.root is not None:
        root = Path(hooks.STATE.root)
        if report_dir is not None and Path(report_dir).resolve() != root.resolve():
            _warn(f"popviz.capture({str(report_dir)!r}): a capture into {root} is already running "
                  "(popviz capture, or an outer popviz.capture); recording there instead")
        hooks.STATE.depth += 1
        try:
            yield CaptureRun(root, joined=True)
        finally:
            hooks.STATE.depth -= 1
            patching.flush()
        return
    if run_count is not None and (not isinstance(run_count, int) or run_count < 1):
        raise UsageError(f"run_count must be a positive integer, got {run_count!r}")
    output = None if report_dir is None else os.fspath(report_dir)
    env = dict(os.environ)
    user_engine = childenv.parse_json_env(childenv.ENGINE_OPTIONS_ENV, env)
    user_pvti = childenv.parse_json_env(childenv.PVTI_ENV, env) if pvti else None
    instance = hooks.instance_from_env(env)
    planned = rundir.plan_dir(output, new_run, instance)
    started = time.time()
    run: dict[str, Any] = {
        "format": rundir.RUN_FORMAT, "format_version": rundir.RUN_FORMAT_VERSION,
        "written_by": f"popviz {__version__}", "status": "running", "started_by": "popviz.capture()",
        "command": list(sys.argv), "command_line": " ".join(sys.argv), "cwd": os.getcwd(),
        "started_at": rundir.iso_now(), "ended_at": None, "duration_seconds": None,
        "exit_code": None, "signal": None, "popviz_exit_code": None,
        "hostname": socket.gethostname(), "popviz_pid": os.getpid(), "child_pid": None,
        "instance": instance, "emulated": None,
        "versions": {"popviz": __version__, "python": sys.version.split()[0], **childenv.sdk_versions(env)},
        "environment": {}, "engine_options": {}, "log": None, "engines": [], "notes": [],
    }
    root = rundir.claim_dir(planned, output, new_run, instance, run)
    abs_root = str(root.resolve())
    engine_opts, conflicts = childenv.merge_options(user_engine, childenv.engine_options(abs_root, run_count))
    changes = {childenv.ENGINE_OPTIONS_ENV: json.dumps(engine_opts)}
    if pvti:
        pvti_opts, pvti_conflicts = childenv.merge_options(user_pvti, {"enable": "true", "directory": abs_root})
        changes[childenv.PVTI_ENV] = json.dumps(pvti_opts)
        conflicts += [dict(c, variable=childenv.PVTI_ENV) for c in pvti_conflicts]
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    run["environment"] = changes
    run["engine_options"] = {"user": user_engine, "merged": engine_opts, "conflicts": [
        dict(c, variable=c.get("variable", childenv.ENGINE_OPTIONS_ENV)) for c in conflicts]}
    for c in conflicts:
        _warn(childenv.conflict_message(c.get("variable", childenv.ENGINE_OPTIONS_ENV), c))
    run_path = root / rundir.RUN_FILE
    rundir.write_run_manifest(run_path, run)
    patching.install(abs_root, owner="api", instance=instance, instance_fixed=bool(instance))
    hooks.STATE.depth = 1
    try:
        yield CaptureRun(Path(abs_root))
        run["status"] = "succeeded"
    except BaseException as exc:
        run["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        run["error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        raise
    finally:
        patching.uninstall()
        hooks.STATE.depth = 0
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        run["ended_at"] = rundir.iso_now()
        run["duration_seconds"] = round(time.time() - started, 3)
        run["engines"] = L._engines_found(root)
        with contextlib.suppress(Exception):
            rundir.write_run_manifest(run_path, run)


def _profile_dir(executor: Any) -> str | None:
    """Where Poplar writes this executor's profile: POPLAR_ENGINE_OPTIONS (which wins) or
    ``Options.enableProfiling(dir)``."""
    raw = os.environ.get(childenv.ENGINE_OPTIONS_ENV)
    with contextlib.suppress(ValueError, TypeError):
        value = json.loads(raw or "{}").get("autoReport.directory")
        if value:
            return str(value)
    options = getattr(executor, "__dict__", {}).get("_options") or snapshot._attr(executor, "options")
    popart = snapshot._attr(options, "_Popart", "options")
    with contextlib.suppress(Exception):
        value = popart["engineOptions"]["autoReport.directory"]
        if value:
            return str(value)
    return None


def wrap(executor: Any, report_dir: str | os.PathLike[str] | None = None) -> Any:
    """Record ``executor``'s configuration and calls (see :func:`popviz.wrap`)."""
    if hooks.recorder_of(executor) is not None:
        return executor
    if not callable(executor):
        raise UsageError(f"popviz.wrap() takes a PopTorch executor (from poptorch.trainingModel or "
                         f"inferenceModel), got {type(executor).__name__}")
    root: str | None
    if report_dir is not None:
        root = str(Path(report_dir).resolve())
        if hooks.STATE.root is None and _profile_dir(executor) is None:
            _warn(f"wrap: profiling is off for this executor, so {report_dir} gets its options and "
                 "call times only (no memory, no cycles): wrap it inside `with popviz.capture(dir):`, or "
                 "turn profiling on (Options.enableProfiling(dir))")
    elif hooks.STATE.root is not None:
        root = None
    else:
        found = _profile_dir(executor)
        if found is None:
            raise UsageError("popviz.wrap(executor): no report directory: pass report_dir=..., run "
                             "inside `with popviz.capture(dir):`, or turn profiling on "
                             "(POPLAR_ENGINE_OPTIONS autoReport.directory, Options.enableProfiling)")
        root = str(Path(found).resolve())
    return patching.wrap_executor(executor, root=root)
