"""Writing an estimated report whatever the script's numpy.

The emulator runs inside the script's interpreter, with the script's packages: a client pinned
to numpy 1 (PyTorch Lightning 1.9, optimum-graphcore 0.7's optimum 1.6.1) may have a pyarrow that
needs numpy 2, or none, and popviz's bundle tables are Parquet files. The cost model needs only
pandas; the tables are then written by a second process in popviz's own interpreter
(:data:`PYTHON_ENV`, which ``popviz capture --emulate`` and ``popviz emulate`` set to the Python
running popviz): the report goes to it as JSON on its stdin (plain values, no pickle) and it
writes the same bundle :func:`popviz.sources.bundle.write_bundle` writes in-process.

:func:`main` (``python -m popviz.emulator.report_writer DIRECTORY``) is that second process,
run isolated from the script's environment: it reads the JSON from stdin, writes the bundle to ``DIRECTORY`` (replacing an emulated bundle there) and exits 0,
or prints one line and exits 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PYTHON_ENV = "POPVIZ_PYTHON"
"""The interpreter popviz itself runs in (with its own numpy and pyarrow)."""
FORMAT = "popviz-report-transfer"
TIMEOUT_SECONDS = 300


class ReportWriteError(SystemExit):
    """An estimated report that cannot be written: one line on stderr, exit code 2 (a run whose
    report is lost must not end as if it had one)."""

    def __init__(self, message: str) -> None:
        from popviz.escape import status_line
        from popviz.ui import fitted

        print(fitted(status_line(f"popviz: error: {' '.join(message.split())}")), file=sys.stderr, flush=True)
        super().__init__(2)
        self.message = message


def tables_unavailable() -> str | None:
    """Why this interpreter cannot write Parquet tables (None: it can)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet

        pa.Table.from_pydict({"x": [1]})
    except Exception as exc:  # ImportError, or a numpy it was not built for
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"{type(exc).__name__}: {first[:200]}"
    return None


def _frame(frame: Any) -> dict[str, Any]:
    return {"columns": [str(c) for c in frame.columns], "dtypes": [str(t) for t in frame.dtypes],
            "data": [frame[c].tolist() for c in frame.columns]}


def _unframe(doc: dict[str, Any]) -> Any:
    import pandas as pd

    columns = {}
    for name, dtype, values in zip(doc["columns"], doc["dtypes"], doc["data"], strict=True):
        series = pd.Series(values, dtype=None if dtype == "object" else dtype)
        columns[name] = series
    return pd.DataFrame(columns, columns=doc["columns"])


def to_json(report: Any) -> dict[str, Any]:
    """The report as plain JSON values (what the bundle's metadata holds, and its tables)."""
    return {
        "format": FORMAT,
        "name": report.name,
        "provenance": report.provenance.to_dict(),
        "target": report.target.to_dict() if report.target else None,
        "config": report.config.to_dict() if report.config is not None else None,
        "host_io": report.host_io.to_dict() if report.host_io is not None else None,
        "layers": report.layers.to_dict() if report.layers is not None else None,
        "memory": None if report.memory is None else {"level": report.memory.level,
                                                       "frame": _frame(report.memory.frame)},
        "execution": None if report.execution is None else {"steps": _frame(report.execution.steps),
                                                             "runs": _frame(report.execution.runs)},
    }


def from_json(doc: dict[str, Any]) -> Any:
    """The Report :func:`to_json` describes."""
    from popviz.model import (
        ExecutionTable,
        HostIO,
        LayerTable,
        MemoryTable,
        ModelConfig,
        Provenance,
        Report,
        Target,
    )

    if doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document")
    memory = doc.get("memory")
    execution = doc.get("execution")
    return Report(
        name=doc["name"],
        provenance=Provenance(**doc["provenance"]),
        target=Target(**doc["target"]) if doc.get("target") is not None else None,
        memory=MemoryTable(_unframe(memory["frame"]), level=memory["level"]) if memory else None,
        execution=(ExecutionTable(_unframe(execution["steps"]), _unframe(execution["runs"]))
                   if execution else None),
        config=ModelConfig(**doc["config"]) if doc.get("config") is not None else None,
        host_io=HostIO(**doc["host_io"]) if doc.get("host_io") is not None else None,
        layers=LayerTable(**doc["layers"]) if doc.get("layers") is not None else None,
    )


HOME = str(Path(__file__).resolve().parents[2])
"""The directory holding this ``popviz`` package (the writer imports the same popviz)."""
_WRITER = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
           "from popviz.emulator.report_writer import main; raise SystemExit(main())")


def _writer_env() -> dict[str, str]:
    """The script's environment without what made it the script's: no emulator shim, no
    capture hooks on the path (popviz's own interpreter finds its own popviz)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def write_elsewhere(report: Any, directory: Path, why: str) -> None:
    """Write ``report``'s bundle to ``directory`` from popviz's own interpreter; raises
    RuntimeError with the reason when that is not possible."""
    python = os.environ.get(PYTHON_ENV)
    if not python or not os.path.isfile(python):
        raise RuntimeError(f"this Python cannot write its tables ({why}) and no popviz interpreter is known "
                           f"({PYTHON_ENV} is not set: run the script under popviz capture --emulate or "
                           "popviz emulate, or install a pyarrow that imports with this numpy)")
    payload = json.dumps(to_json(report), allow_nan=True).encode()
    try:
        # isolated (-I: no PYTHON* variables, no user site, not the script's directory on the
        # path, where a folder named like a package would shadow it); this very popviz first
        proc = subprocess.run([python, "-I", "-c", _WRITER, HOME, str(directory)], input=payload,
                              capture_output=True, env=_writer_env(), timeout=TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"popviz's interpreter {python} did not write it ({exc})") from None
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"popviz's interpreter {python} did not write it "
                           f"({lines[-1] if lines else f'exit code {proc.returncode}'})")


_tables: list[str | None] = []
"""This interpreter's :func:`tables_unavailable`, asked once."""


def write(report: Any, directory: Path) -> None:
    """Write ``report``'s bundle to ``directory`` (replacing an emulated one): here when this
    interpreter writes Parquet, else from popviz's own (:func:`write_elsewhere`)."""
    from popviz.sources import bundle

    if not _tables:
        _tables.append(tables_unavailable())
    if _tables[0] is None:
        bundle.write_bundle(report, directory, overwrite=True)
    else:
        write_elsewhere(report, directory, _tables[0])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m popviz.emulator.report_writer DIRECTORY < report.json", file=sys.stderr)
        return 2
    try:
        from popviz.sources import bundle

        report = from_json(json.loads(sys.stdin.buffer.read()))
        bundle.write_bundle(report, Path(args[0]), overwrite=True)
    except Exception as exc:  # one line for the process that asked
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"popviz: error: {type(exc).__name__}: {first[:300]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["PYTHON_ENV", "ReportWriteError", "from_json", "tables_unavailable", "to_json", "write",
           "write_elsewhere"]
