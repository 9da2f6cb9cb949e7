"""The profiling switch, and writing each engine's estimated report.

Profiling is on, as in PopTorch, when the Poplar engine options say ``autoReport.all`` (or any
``autoReport.output*``) is true: the options set by ``Options.enableProfiling(dir)`` merged with
``POPLAR_ENGINE_OPTIONS`` (JSON; the environment wins). Values may be the string ``"true"`` or a
JSON ``true`` (as PyTorch Lightning writes). Reports go to ``<autoReport.directory or
.>/<engine>/`` as popviz bundles: written when the engine compiles, updated when it is destroyed
and when the process exits (from popviz's own interpreter when the script's cannot write Parquet:
:mod:`popviz.emulator.report_writer`). A first report that cannot be written stops the script
with one line and exit code 2.

Like Poplar's autoReport, a later run replaces the previous emulated report in the same engine
directory, with a one-line warning. Nothing else is ever replaced: a directory holding a report
the emulator did not write (a Poplar ``profile.pop``, an exported bundle) is left alone, with a
warning, and no report is written there. Without the switch no file is written at all.
"""

from __future__ import annotations

import atexit
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from popviz.emulator import log, report_writer, runtime_options
from popviz.errors import shown
from popviz.model import Report
from popviz.sources import bundle

ENV = runtime_options.ENGINE_ENV
PROFILE_FILE = "profile.pop"


_truthy = runtime_options.truthy
engine_options = runtime_options.engine_options


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

    def write(self, first: bool = False) -> None:
        """Write (or update) the bundle. ``first``: the compile's write, which must succeed (a
        :class:`~popviz.emulator.report_writer.ReportWriteError` otherwise: one line, exit code
        2); a later update that fails only warns (it must not break the user's training)."""
        if _owners.get(self.directory) is not self:
            return  # a later engine with the same name took the directory over
        try:
            report_writer.write(self.build(), self.directory)
            self.written = True
        except Exception as exc:
            if first:  # stops the script: no update at exit repeats the same failure as a warning
                _owners.pop(self.directory, None)
                raise report_writer.ReportWriteError(
                    f"could not write the estimated report to {shown(self.directory)}: {exc}") from None
            log.write_failed(f"could not write the estimated report to {shown(self.directory)}: {exc}", self.directory)


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
    engine.write(first=True)
    if engine.written:
        log.note(f"estimated report of {name!r} written to {shown(directory)}")
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
