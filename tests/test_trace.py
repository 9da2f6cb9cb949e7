"""popviz trace: the execution as a Perfetto / chrome://tracing trace, read back by a parser of
each format: Perfetto's own protobuf schema (``perfetto_trace_pb2`` from the ``perfetto`` PyPI
package: its trace_processor binary downloads at run time, which fails offline) and a strict
checker of Chrome's Trace Event Format (the published spec: ``traceEvents``, ``ph`` ``X`` with
``ts``/``dur`` in microseconds, ``M`` metadata), on the sample and on reports built with
popviz.testing."""

from __future__ import annotations

import itertools
import json
import math

import pandas as pd
import pytest

import popviz
from popviz import testing
from popviz.model.tables import ExecutionTable
from popviz.render import trace as tr
from popviz.sources.bundle import write_bundle

from conftest import SAMPLES, assert_one_line_error, run_cli, unwrapped

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                         reason="the [test] extra installs perfetto (Perfetto's trace protos)")

BERT = SAMPLES / "bert_even_split"


def read_perfetto(data: bytes) -> dict:
    """Parse a Perfetto trace with Perfetto's schema and check what its trace processor relies
    on: interned names resolve on a sequence whose state was cleared first, every event's track
    is declared, and each track's begins and ends pair up without partial overlap. Returns
    ``{track name: [(name, category, start_ns, end_ns, {arg: value})]}`` and the processes."""
    t = pb.Trace()
    t.ParseFromString(data)
    names: dict[int, str] = {}
    cats: dict[int, str] = {}
    arg_names: dict[int, str] = {}
    tracks: dict[int, str] = {}
    parents: dict[int, int] = {}
    processes: dict[int, tuple[int, str]] = {}
    open_: dict[int, list] = {}
    out: dict[str, list] = {}
    cleared = False
    last_ts = 0
    for p in t.packet:
        assert p.trusted_packet_sequence_id == 1
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared = True
        if p.HasField("interned_data"):
            assert cleared
            names.update({e.iid: e.name for e in p.interned_data.event_names})
            cats.update({e.iid: e.name for e in p.interned_data.event_categories})
            arg_names.update({e.iid: e.name for e in p.interned_data.debug_annotation_names})
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in tracks and d.uuid not in processes
            if d.HasField("process"):
                processes[d.uuid] = (d.process.pid, d.process.process_name)
            else:
                assert d.parent_uuid in processes
                tracks[d.uuid] = d.name
                parents[d.uuid] = d.parent_uuid
        if p.HasField("track_event"):
            assert cleared and p.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            assert p.timestamp >= last_ts  # one sequence, in time order
            last_ts = p.timestamp
            e = p.track_event
            assert e.track_uuid in tracks
            stack = open_.setdefault(e.track_uuid, [])
            if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                assert not stack, "slices of one track overlap"
                args = {arg_names[a.name_iid]: (a.string_value if a.HasField("string_value") else a.int_value)
                        for a in e.debug_annotations}
                stack.append((names[e.name_iid], cats[e.category_iids[0]], p.timestamp, args))
            else:
                assert e.type == pb.TrackEvent.TYPE_SLICE_END and stack
                n, c, ts, args = stack.pop()
                out.setdefault(tracks[e.track_uuid], []).append((n, c, ts, p.timestamp, args))
    assert not any(open_.values()), "a slice never ends"
    return {"tracks": out, "processes": sorted(processes.values()), "track_names": list(tracks.values())}


def check_chrome_json(data: bytes) -> dict:
    """Chrome's Trace Event Format, strictly: an object with ``traceEvents``; ``M`` events name
    processes and threads; ``X`` events have a name, a category, pid/tid integers, ``ts`` and
    ``dur`` non-negative numbers (microseconds) and ``args`` an object; the complete events of
    one thread never partially overlap."""
    doc = json.loads(data)
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in ("ms", "ns")
    threads: dict[tuple[int, int], str] = {}
    procs: dict[int, str] = {}
    out: dict[str, list] = {}
    for ev in doc["traceEvents"]:
        assert ev["ph"] in ("X", "M"), ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int) and isinstance(ev["name"], str)
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            if ev["name"] == "process_name":
                procs[ev["pid"]] = ev["args"]["name"]
            if ev["name"] == "thread_name":
                threads[(ev["pid"], ev["tid"])] = ev["args"]["name"]
            continue
        assert set(ev) == {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"}
        assert isinstance(ev["cat"], str) and isinstance(ev["args"], dict)
        for k in ("ts", "dur"):
            assert isinstance(ev[k], (int, float)) and math.isfinite(ev[k]) and ev[k] >= 0
        out.setdefault(threads[(ev["pid"], ev["tid"])], []).append(ev)
    for events in out.values():
        events.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(events):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (a, b)
    return {"tracks": out, "processes": procs}


def test_bert_even_split_opens_in_perfetto_format(tmp_path):
    out = tmp_path / "bert.pftrace"
    proc = run_cli("trace", str(BERT), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert " ".join(proc.stdout.split()) == (f"{out}: Perfetto protobuf, {out.stat().st_size:,} bytes, 2,067 slices "
                                             "on 4 IPU track(s) of 1 engine(s); open it at ui.perfetto.dev")
    assert all(len(line) <= 100 for line in proc.stdout.splitlines()[1:])  # COLUMNS=100: wrapped
    t = read_perfetto(out.read_bytes())
    assert t["processes"] == [(1, "training (estimated)")]
    assert t["track_names"] == ["host: executor", "host: transfers"] + [
        f"IPU{i} {k}" for i in range(4) for k in ("program steps", "pipeline stages")]
    steps = popviz.load(BERT)["training"].execution.steps
    tracks = t["tracks"]
    # every step once, on its IPU's track, with its cycles; compute steps again on the stages track
    for ipu in range(4):
        mine = steps[steps.ipu == ipu]
        got = tracks[f"IPU{ipu} program steps"]
        assert len(got) == len(mine)
        assert sum(a["cycles"] for *_, a in got) == int(mine.cycles.sum())
        assert len(tracks[f"IPU{ipu} pipeline stages"]) == int((mine.program_type == "OnTileExecute").sum())
    assert sum(len(v) for v in tracks.values()) == 2067
    clock = 1.33e9
    compile_ns = 5_453_272_000  # the hooks' compile time, 5.453272 s, first on the host track
    assert tracks["host: executor"][0][:4] == ("compile", "host", 0, compile_ns)
    name, _cat, start, end, args = tracks["host: executor"][1]
    wall = float(popviz.load(BERT)["training"].execution.runs.duration_seconds[0])  # the run's own
    assert (name, start, end - start) == ("call", compile_ns, round(wall * 1e9))
    assert args["ipu_cycles"] == 264_167_008 and args["calls_recorded"] == 1
    # IPU0's first forward of stage 0 starts at cycle 14,662 of the call and lasts 684,954 cycles
    first = tracks["IPU0 pipeline stages"][0]
    assert first[0] == "stage 0 forward"
    assert first[2] == compile_ns + round(14_662 * 1e9 / clock)
    assert first[3] - first[2] == round((14_662 + 684_954) * 1e9 / clock) - round(14_662 * 1e9 / clock)
    # stage 4 (the MLM head) runs on IPU 0 too: its own name on IPU 0's stages track
    assert {n for n, *_ in tracks["IPU0 pipeline stages"]} == {"stage 0 forward", "stage 0 backward",
                                                                 "stage 4 forward", "stage 4 backward",
                                                                 "stages 0, 4: weightUpdate"}
    transfers = tracks["host: transfers"]
    assert [x[0] for x in transfers] == ["host→IPU inputs", "IPU→host outputs"]
    assert transfers[0][4]["bytes_per_micro_batch"] == 8192
    assert transfers[1][3] == compile_ns + round(wall * 1e9)  # ends with the call


def test_chrome_json_has_the_same_slices(tmp_path):
    pf, js = tmp_path / "t.pftrace", tmp_path / "t.json"
    assert run_cli("trace", str(BERT), "-o", str(pf)).returncode == 0
    proc = run_cli("trace", str(BERT), "-o", str(js))
    assert proc.returncode == 0 and ": Chrome JSON, " in unwrapped(proc.stdout)
    a, b = read_perfetto(pf.read_bytes()), check_chrome_json(js.read_bytes())
    assert b["processes"] == {1: "training (estimated)"}
    assert {k: len(v) for k, v in a["tracks"].items()} == {k: len(v) for k, v in b["tracks"].items()}
    for track, slices in a["tracks"].items():
        for (n, c, s, e, args), ev in zip(slices, b["tracks"][track], strict=True):
            assert (n, c, args) == (ev["name"], ev["cat"], ev["args"])
            assert abs(ev["ts"] * 1e3 - s) < 1 and abs(ev["dur"] * 1e3 - (e - s)) < 1


def test_refuses_to_overwrite_without_force_and_reports_without_execution(tmp_path):
    out = tmp_path / "t.pftrace"
    out.write_text("mine")
    assert_one_line_error(run_cli("trace", str(BERT), "-o", str(out)), "exists", "--force")
    assert out.read_text() == "mine"
    assert run_cli("trace", str(BERT), "-o", str(out), "--force").returncode == 0
    read_perfetto(out.read_bytes())
    assert_one_line_error(run_cli("trace", str(SAMPLES / "oom_model"), "-o", str(tmp_path / "o.json")),
                          "no execution profile")
    assert not (tmp_path / "o.json").exists()
    assert_one_line_error(run_cli("trace", str(BERT), "-o", str(tmp_path / "x.json"), "--max-events", "5"),
                          "--max-events 5")


def _renamed(report, programs: dict[str, str]):
    steps = report.execution.steps.copy()
    steps["program"] = steps["program"].astype(str).replace(programs)
    return report.replace(execution=ExecutionTable(steps, report.execution.runs))


def test_names_from_the_report_are_data(tmp_path):
    report = testing.pipeline_report([1000, 1200], name="evil\x1b]52;c;SGVsbG8=\x07\nname",
                                     gradient_accumulation=4, device_iterations=1)
    first = str(report.execution.steps["program"].iloc[0])
    report = _renamed(report, {first: "\x1b[2J<script>\u202e\r\nx"})
    write_bundle(report, tmp_path / "r" / "evil")
    for suffix, reader in (("pftrace", read_perfetto), ("json", check_chrome_json)):
        out = tmp_path / f"t.{suffix}"
        proc = run_cli("trace", str(tmp_path / "r"), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        t = reader(out.read_bytes())
        shown = [n for slices in t["tracks"].values() for n in
                 ((s[0] for s in slices) if suffix == "pftrace" else (e["name"] for e in slices))]
        procs = [p[1] for p in t["processes"]] if suffix == "pftrace" else list(t["processes"].values())
        for text in (*shown, *procs):
            assert text.isprintable(), repr(text)
        assert "\ufffd[2J<script>\ufffd\ufffd\ufffdx" in shown
        assert procs == ["evil\ufffd]52;c;SGVsbG8=\ufffd\ufffdname"]


def test_large_reports_merge_steps_and_keep_their_cycles(tmp_path):
    out = tmp_path / "m.pftrace"
    proc = run_cli("trace", str(BERT), "-o", str(out), "--max-events", "300")
    assert proc.returncode == 0, proc.stderr
    assert "1,419 steps are more than 300 events: every 10 consecutive steps" in " ".join(proc.stderr.split())
    t = read_perfetto(out.read_bytes())["tracks"]
    assert sum(len(v) for v in t.values()) <= 300
    steps = popviz.load(BERT)["training"].execution.steps
    for ipu in range(4):
        mine = steps[steps.ipu == ipu]
        merged = t[f"IPU{ipu} program steps"]
        assert sum(a["steps"] for *_, a in merged) == len(mine)
        by_type = mine.groupby("program_type", observed=True)["cycles"].sum()
        for kind, cycles in by_type.items():
            assert sum(a.get(f"cycles.{kind}", 0) for *_, a in merged) == int(cycles)
        assert sum(a["cycles"] for *_, a in t[f"IPU{ipu} pipeline stages"]) == int(by_type["OnTileExecute"])


def test_a_pod64_sized_report_stays_small():
    """64 IPUs of 5,000 steps each (320,000 steps): merged to the default budget, the protobuf
    stays a few MB."""
    import numpy as np

    n_ipus, per_ipu = 64, 5_000
    ipu = np.repeat(np.arange(n_ipus, dtype=np.int32), per_ipu)
    step = np.tile(np.arange(per_ipu, dtype=np.int32), n_ipus)
    kinds = np.array(["OnTileExecute", "Sync", "DoExchange", "StreamCopyMid"])
    steps = pd.DataFrame({"run": np.zeros(len(ipu), dtype=np.int32), "step": step,
                          "program": pd.Categorical([f"stage{i}/forward" for i in ipu]),
                          "program_type": pd.Categorical(kinds[step % 4]), "ipu": ipu,
                          "cycles": np.full(len(ipu), 1000, dtype=np.int64),
                          "start_cycle": pd.array(step.astype(np.int64) * 1000, dtype="Int64")})
    report = testing.pipeline_report([1000] * 4).replace(execution=ExecutionTable(steps))
    built = tr.build([report])
    assert built.merged_steps == math.ceil(2 * len(steps) / (tr.DEFAULT_MAX_EVENTS - 6 - 2 * 64))
    assert len(built.slices) <= tr.DEFAULT_MAX_EVENTS
    data = tr.to_perfetto(built)
    assert len(data) < 12 * 2**20
    t = read_perfetto(data)["tracks"]
    assert len([k for k in t if k.endswith("program steps")]) == 64
    assert sum(a["steps"] for *_, a in t["IPU63 program steps"]) == per_ipu
