"""The profiling switch, and writing each engine's estimated report.

Profiling is on, as in PopTorch, when the Poplar engine options say ``autoReport.all`` (or any
``autoReport.output*``) is true: the options set by ``Options.enableProfiling(dir)`` merged with
``POPLAR_ENGINE_OPTIONS`` (JSON; the environment wins). Values may be the string ``"true"`` or a
JSON ``true`` (as PyTorch Lightning writes). Reports go to ``<autoReport.directory or
.>/<engine>/`` as popviz bundles: written when the engine compiles, updated when it is destroyed
and when the process exits.

Like Poplar's autoReport, a later run replaces the previous emulated report in the same engine
directory, with a one-line warning. Nothing else is ever replaced: a directory holding a report
the emulator did not write (a Poplar ``profile.pop``, an exported bundle) is left alone, with a
warning, and no report is written there. Without the switch no file is written at all.
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from popviz.emulator import log
from popviz.emulator.errors import Error
from popviz.errors import shown
from popviz.model import Report
from popviz.sources import bundle

ENV = "POPLAR_ENGINE_OPTIONS"
PROFILE_FILE = "profile.pop"


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _env_options(name: str, example: str) -> dict[str, Any]:
    """The JSON object in the environment variable ``name`` ({} when unset or empty)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Error(f"{name} is not valid JSON ({exc.msg} at column {exc.colno}): {raw!r}; write it "
                    f"like '{example}'") from None
    if not isinstance(value, dict):
        raise Error(f"{name} must be a JSON object, got {raw!r}")
    return value


def engine_options(options_engine: Mapping[str, Any]) -> dict[str, Any]:
    """The engine options in effect: the program's, overridden by ``POPLAR_ENGINE_OPTIONS``."""
    return {**options_engine,
            **_env_options(ENV, '{"autoReport.all":"true","autoReport.directory":"./reports"}')}


RUNTIME_ENV = "POPLAR_RUNTIME_OPTIONS"


def prefetch_depth(popart: Mapping[str, Any]) -> int:
    """Inputs the host may prepare ahead of the IPU: PopART's ``defaultPrefetchBufferingDepth``
    (Poplar prefetches by default with a depth of 1), 0 when ``enablePrefetchDatastreams`` is
    off."""
    if not _truthy(str(popart.get("enablePrefetchDatastreams", True)).lower()):
        return 0
    try:
        return max(1, int(popart.get("defaultPrefetchBufferingDepth", 1)))
    except (TypeError, ValueError):
        return 1


def callback_threads(options_engine: Mapping[str, Any], local_replicas: int) -> int:
    """Host threads serving the stream callbacks: Poplar runs them all on the main thread unless
    ``streamCallbacks.multiThreadMode`` is ``collaborative`` or ``dedicated`` with worker threads
    (``numWorkerThreads``: a number or ``auto``, one per core). Each replica's streams are served
    by one thread at a time, so at most one thread per local replica helps. Runtime options come
    from the engine options and ``POPLAR_RUNTIME_OPTIONS`` (which wins)."""
    merged = {**engine_options(options_engine),
              **_env_options(RUNTIME_ENV, '{"streamCallbacks.multiThreadMode":"collaborative"}')}
    mode = str(merged.get("streamCallbacks.multiThreadMode", "singleThread")).strip()
    if mode not in ("collaborative", "dedicated"):
        return 1
    workers = str(merged.get("streamCallbacks.numWorkerThreads", "0")).strip().lower()
    if workers == "auto":
        return max(1, local_replicas)
    try:
        return max(1, min(int(workers), local_replicas))
    except ValueError:
        return 1


def profile_dir(options_engine: Mapping[str, Any]) -> Path | None:
    """Where reports go, or None when profiling is off."""
    merged = engine_options(options_engine)
    on = _truthy(merged.get("autoReport.all")) or any(
        _truthy(v) for k, v in merged.items() if k.startswith("autoReport.output"))
    if not on:
        return None
    return Path(str(merged.get("autoReport.directory") or "."))


class EngineReport:
    """One engine's report on disk: claims its directory, writes and updates the bundle."""

    def __init__(self, directory: Path, build: Callable[[], Report]) -> None:
        self.directory = directory
        self.build = build
        self.written = False

    def write(self) -> None:
        if _owners.get(self.directory) is not self:
            return  # a later engine with the same name took the directory over
        try:
            bundle.write_bundle(self.build(), self.directory, overwrite=True)
            self.written = True
        except Exception as exc:  # a report must never break the user's training
            log.warn(f"could not write the estimated report to {shown(self.directory)}: {exc}")


_owners: dict[Path, EngineReport] = {}
"""Directory -> the engine whose report it holds now (updated at exit)."""
_history: dict[Path, object] = {}
"""Directory -> token of the last executor that wrote there in this process."""


def _existing_report(directory: Path) -> str | None:
    """What already sits in ``directory``: None (nothing to protect), 'emulated' or a reason to
    leave it alone."""
    meta = directory / bundle.METADATA_FILE
    if meta.exists():
        try:
            doc = json.loads(meta.read_text(encoding="utf-8"))
            if doc.get("format") == bundle.FORMAT_NAME and doc.get("provenance", {}).get("source") == "emulator":
                return "emulated"
        except (OSError, ValueError, AttributeError):
            pass
        return f"a report popviz's emulator did not write ({bundle.METADATA_FILE})"
    if (directory / PROFILE_FILE).exists():
        return f"a Poplar report ({PROFILE_FILE})"
    return None


def claim(directory: Path, name: str, build: Callable[[], Report], token: object) -> EngineReport | None:
    """Take ``directory`` for engine ``name`` (of the executor identified by ``token``) and write
    its first report; None when it must be left alone (a warning says why)."""
    directory = directory.resolve()
    engine = EngineReport(directory, build)
    previous = _history.get(directory)
    if previous is token:
        pass  # the same executor compiling again (after destroy())
    elif previous is not None:
        log.warn(f"replacing the report of an earlier engine named '{name}' in {shown(directory)} "
                 "(give each model its own Options.modelName to keep both)")
    else:
        found = _existing_report(directory)
        if found == "emulated":
            log.warn(f"replacing the estimated report of an earlier run in {shown(directory)}")
        elif found is not None:
            log.warn(f"{shown(directory)} holds {found}; leaving it alone and writing no report for "
                     f"'{name}' (choose another autoReport.directory)")
            return None
    _owners[directory] = engine
    _history[directory] = token
    engine.write()
    if engine.written:
        log.note(f"estimated report of '{name}' written to {shown(directory)}")
    return engine


def release(engine: EngineReport) -> None:
    """The engine is gone: update its report one last time and stop tracking it."""
    engine.write()
    if _owners.get(engine.directory) is engine:
        del _owners[engine.directory]


@atexit.register
def _update_all() -> None:
    for engine in list(_owners.values()):
        engine.write()


def write_all() -> None:
    """Update every live engine's report now (popviz's pytest plugin reads them mid-process)."""
    _update_all()


__all__ = ["EngineReport", "claim", "engine_options", "profile_dir", "release", "write_all"]
