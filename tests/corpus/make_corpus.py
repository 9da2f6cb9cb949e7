"""The malformed-input corpus: hostile and impossible report directories, each with the outcome
popviz must give. Generated (not committed as binaries): every case starts from a valid bundle
made by ``popviz.testing`` and damages one thing.

    python tests/corpus/make_corpus.py OUT_DIR     # writes OUT_DIR/<case>/ and OUT_DIR/expected.json

Outcomes: ``("error", needles)`` — exit 2, one line on stderr containing every needle, and
``popviz.load()`` raises a PopvizError; ``("ok", needles)`` — analysed (exit 0) and the console
output contains every needle.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

META = "popviz-report.json"


def _base(directory: Path, **kwargs: Any) -> Path:
    from popviz import testing
    from popviz.sources.bundle import write_bundle

    opts = {"tiles_per_ipu": 8, **kwargs}
    write_bundle(testing.pipeline_report([1000, 2000], **opts), directory)
    return directory


def _edit_meta(directory: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    path = directory / META
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=1))


def _edit_table(directory: Path, file: str, edit: Callable[[Any], Any]) -> None:
    """Rewrite one Parquet table through ``edit(frame) -> frame`` (bypassing the model), keeping
    the metadata's row count in step."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = edit(pq.read_table(directory / file).to_pandas())
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), directory / file)

    def rows(doc: dict[str, Any]) -> None:
        for part in ("memory", "execution"):
            sect = doc.get(part) or {}
            if file in (sect.get("file"), sect.get("steps_file")):
                sect["rows"] = len(frame)
    _edit_meta(directory, rows)


def _set(frame, column: str, row: int, value: Any):
    frame = frame.copy()
    if isinstance(value, float) and frame[column].dtype.kind != "f":
        frame[column] = frame[column].astype("float64")
    if isinstance(value, int) and abs(value) > 2**62 and frame[column].dtype.kind == "i":
        frame[column] = frame[column].astype("uint64")
    frame.loc[row, column] = value
    return frame


def _meta_case(edit: Callable[[dict[str, Any]], None], **base: Any) -> Callable[[Path], None]:
    return lambda d: _edit_meta(_base(d, **base), edit)


def _table_case(file: str, edit: Callable[[Any], Any], **base: Any) -> Callable[[Path], None]:
    return lambda d: _edit_table(_base(d, **base), file, edit)


def _stage(doc: dict[str, Any], key: str, value: Any) -> None:
    doc["config"]["stages"][1][key] = value


def _deep(d: Path) -> None:
    _base(d)
    (d / META).write_text('{"format": "popviz-bundle", "format_version": 1, "name": '
                          + "[" * 100_000 + "]" * 100_000 + "}")


def _big_int(d: Path) -> None:
    _base(d)
    from popviz.sources.bundle import FORMAT_VERSION

    text = (d / META).read_text().replace(f'"format_version": {FORMAT_VERSION}',
                                          '"format_version": ' + "9" * 5001)
    (d / META).write_text(text)


def _symlink_table(d: Path) -> None:
    _base(d)
    outside = d.parent / f"{d.name}-outside.parquet"
    os.replace(d / "memory.parquet", outside)
    os.symlink(outside, d / "memory.parquet")


def _self_symlink(d: Path) -> None:
    d.mkdir()
    os.symlink("loop", d / "loop")
    (d / "engine").mkdir()
    os.symlink(d / "engine" / "self", d / "engine" / "self")


def _loop_input(d: Path) -> None:
    d.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(d.name, d)  # the input path itself is a self-referencing symlink


def _markup(d: Path) -> None:
    from popviz import testing
    from popviz.sources.bundle import write_bundle

    write_bundle(testing.pipeline_report([1000, 2000], tiles_per_ipu=8, name="[bold]eng[/bold]",
                                         blocks=[["[/link]x"], ["[red]y"]]), d)


def _truncated(d: Path) -> None:
    _base(d)
    data = (d / "execution.parquet").read_bytes()
    (d / "execution.parquet").write_bytes(data[: len(data) // 2])


CASES: dict[str, tuple[Callable[[Path], None], tuple[str, tuple[str, ...]]]] = {
    "negative_bytes": (_table_case("memory.parquet", lambda f: _set(f, "always_live_bytes", 3, -5)),
                       ("error", ("always_live_bytes", "row 3", "negative"))),
    "duplicate_tile_rows": (_table_case("memory.parquet", lambda f: f.iloc[[*range(len(f)), 0]]),
                            ("error", ("'tile'", "row 16", "more than once"))),
    "excluding_gt_including": (
        _table_case("memory.parquet", lambda f: _set(f, "total_bytes_excluding_gaps", 2, 10**9)),
        ("error", ("total_bytes_excluding_gaps", "row 2"))),
    "memory_ipu_negative": (_table_case("memory.parquet", lambda f: _set(f, "ipu", 0, -1)),
                            ("error", ("'ipu'", "row 0", "2 IPU"))),
    "memory_ipu_99": (_table_case("memory.parquet", lambda f: _set(f, "ipu", 0, 99)),
                      ("error", ("'ipu'", "row 0"))),
    "tile_5000": (_table_case("memory.parquet", lambda f: _set(f, "tile", 1, 5000)),
                  ("error", ("'tile'", "row 1", "8 tiles"))),
    "float_ipu_index": (_table_case("memory.parquet", lambda f: _set(f, "ipu", 1, 0.5)),
                        ("error", ("ipu", "row 1", "whole number"))),
    "fractional_cycles": (_table_case("execution.parquet", lambda f: _set(f, "cycles", 4, 10.25)),
                          ("error", ("cycles", "row 4", "whole number"))),
    "huge_cycles": (_table_case("execution.parquet", lambda f: f.assign(cycles=2**62)),
                    ("error", ("cycles", "2**62"))),
    "cycles_beyond_int64": (_table_case("execution.parquet", lambda f: _set(f, "cycles", 0, 2**63 + 5)),
                            ("error", ("cycles", "row 0"))),
    "negative_cycles": (_table_case("execution.parquet", lambda f: _set(f, "cycles", 7, -1)),
                        ("error", ("cycles", "row 7", "negative"))),
    "exec_ipu_7": (_table_case("execution.parquet", lambda f: _set(f, "ipu", 5, 7)),
                   ("error", ("'ipu'", "row 5"))),
    "negative_duration": (_table_case("runs.parquet", lambda f: _set(f, "duration_seconds", 0, -5.0)),
                          ("error", ("duration_seconds", "row 0"))),
    "infinite_duration": (_table_case("runs.parquet",
                                      lambda f: _set(f, "duration_seconds", 0, float("inf"))),
                          ("error", ("duration_seconds", "row 0"))),
    "clock_infinity": (_meta_case(lambda m: m["target"].update(clock_hz=float("inf"))),
                       ("error", ("clock_hz",))),
    "clock_negative": (_meta_case(lambda m: m["target"].update(clock_hz=-1.0)), ("error", ("clock_hz",))),
    "estimated_string": (_meta_case(lambda m: m["provenance"].update(estimated="no")),
                         ("error", ("estimated", "'no'"))),
    "stage_on_ipu_7": (_meta_case(lambda m: _stage(m, "ipu", 7)), ("error", ("stages[1].ipu", "IPU 7"))),
    "stage_index_word": (_meta_case(lambda m: _stage(m, "index", "zero")), ("error", ("stages[1].index",))),
    "amp_keyed_by_word": (_meta_case(lambda m: m["config"].update(available_memory_proportion={"one": 0.5})),
                          ("error", ("popviz-report.json",))),
    # a proportion for an IPU the target lacks: PopTorch accepts it (a 16-IPU script run on fewer),
    # so loading keeps the used IPUs and the memory analysis names the ignored one (issue 21)
    "amp_on_missing_ipu": (_meta_case(lambda m: m["config"].update(available_memory_proportion={"9": 0.5})),
                           ("ok", ("IPU9",))),
    "amp_on_negative_ipu": (_meta_case(lambda m: m["config"].update(available_memory_proportion={"-1": 0.5})),
                            ("error", ("available_memory_proportion", "IPU -1"))),
    "call_stats_wrong_type": (_meta_case(lambda m: m["host_io"].update(call_stats="fast")),
                              ("error", ("popviz-report.json",))),
    "call_stats_list_items": (_meta_case(lambda m: m["host_io"].update(call_stats=[[1, 2]])),
                              ("error", ("popviz-report.json",))),
    "optimizer_flag_string": (_meta_case(lambda m: m["config"].update(optimizer_state_on_chip="yes")),
                              ("error", ("optimizer_state_on_chip",))),
    "everyn_period_above_d": (
        _meta_case(lambda m: m["config"].update(output_mode="EveryN", output_return_period=8,
                                                device_iterations=4)),
        ("error", ("output_return_period", "8", "4"))),
    "deep_json": (_deep, ("error", ("popviz-report.json", "deeply"))),
    "big_integer": (_big_int, ("error", ("popviz-report.json",))),
    "table_symlink_outside": (_symlink_table, ("error", ("memory.parquet", "symbolic link"))),
    "truncated_parquet": (_truncated, ("error", ("execution.parquet", "Parquet"))),
    "symlink_loops": (_self_symlink, ("error", ("no report found",))),
    "input_is_symlink_loop": (_loop_input, ("error", ("input_is_symlink_loop",))),
    "markup_in_names": (_markup, ("ok", ("[bold]eng[/bold]", "[/link]x", "[red]y"))),
    "hostile_engine_name": (_meta_case(lambda m: m.update(name="../../victim")),
                            ("ok", ("../../victim",))),
}
"""Case name -> (builder writing the case into a new directory, expected outcome)."""


def make(out: Path, names: list[str] | None = None) -> dict[str, Any]:
    """Write the cases into ``out`` and return {case: expected}."""
    out.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name in names or CASES:
        build, outcome = CASES[name]
        build(out / name)
        expected[name] = {"outcome": outcome[0], "needles": list(outcome[1])}
    return expected


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/corpus/make_corpus.py OUT_DIR")
    target = Path(sys.argv[1])
    exp = make(target)
    (target / "expected.json").write_text(json.dumps(exp, indent=1) + "\n")
    print(f"{len(exp)} cases written to {target}")
