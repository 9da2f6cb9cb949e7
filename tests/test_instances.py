"""Multi-instance runs: the instances cross-check on built reports (exact figures), and real
two-rank captures (a PopRun-like launcher, and one `popviz capture` per rank)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import popviz
from popviz import testing
from popviz.analysis import analyse, instances
from popviz.model import CallStats, HostIO, ReportSet

from conftest import ROOT, assert_one_line_error, run_cli, unwrapped

PY = sys.executable
FAKE_ENV = {"PYTHONPATH": str(ROOT / "tests" / "fake_poptorch")}


def _set(*reports):
    return ReportSet([r.replace(instance=f"instance-{i}") for i, r in enumerate(reports)], root="run")


def _with_call_time(report, p50):
    return report.replace(host_io=HostIO(calls=10, call_stats=(
        CallStats("wall_seconds", count=10, sum=10 * p50, min=p50, max=p50, p50=p50),)))


def test_single_instance_gives_nothing():
    reports = ReportSet([testing.pipeline_report([100, 100], tiles_per_ipu=4)])
    assert instances.check(reports) == {}
    assert "instances" not in analyse(reports).analyses


def test_identical_instances_no_findings_and_a_table():
    r = testing.pipeline_report([100, 100], tiles_per_ipu=4, gradient_accumulation=4)
    out = instances.check(_set(r, r, r))
    assert sorted(out) == ["instance-0/training", "instance-1/training", "instance-2/training"]
    assert all(not o.findings for o in out.values())
    table = out["instance-0/training"].table
    assert list(table["instance"]) == ["instance-0", "instance-1", "instance-2"]
    assert out["instance-1/training"].table is None
    assert out["instance-2/training"].metrics["instances"] == 3
    # no call timings in built reports: said, not skipped silently
    [nc] = out["instance-0/training"].not_checked
    assert (nc.check, nc.reason) == ("median call wall time across instances",
                                     "known for 0 of 3 instances of training")


def test_differing_config_flags_the_odd_instance():
    a = testing.pipeline_report([100, 100], tiles_per_ipu=4, gradient_accumulation=8, device_iterations=2)
    b = testing.pipeline_report([100, 100], tiles_per_ipu=4, gradient_accumulation=8, device_iterations=4)
    out = instances.check(_set(a, b, a))
    assert not out["instance-0/training"].findings and not out["instance-2/training"].findings
    # twice the device iterations: twice the cycles per run too
    f, cycles = out["instance-1/training"].findings
    assert cycles.code == "INST005"
    assert (f.code, f.severity, f.analysis) == ("INST002", "warning", "instances")
    assert f.title == "instance-1 runs training with a different device iterations"
    assert f.evidence == "device iterations on instance-1: 4; on instance-0, instance-2: 2"


def test_slower_instance_flagged_faster_not():
    r = testing.pipeline_report([100, 100], tiles_per_ipu=4)
    times = (0.010, 0.010, 0.0135, 0.006)
    out = instances.check(_set(*(_with_call_time(r, t) for t in times)))
    flagged = {label: [f.code for f in o.findings] for label, o in out.items()}
    assert flagged == {"instance-0/training": [], "instance-1/training": [],
                       "instance-2/training": ["INST003"], "instance-3/training": []}
    [f] = out["instance-2/training"].findings
    assert f.title == "instance-2: median call wall time 35% above the other instances"
    assert f.evidence == ("median call wall time of training on instance-2: 13.50 ms; median of the other "
                          "3 instance(s): 10.00 ms (flagged above 25%)")
    assert list(out["instance-0/training"].table["median_call_ms"]) == [10.0, 10.0, 13.5, 6.0]


def test_memory_and_cycles_differences_flagged():
    a = testing.pipeline_report([20000, 20000], tiles_per_ipu=4, memory_frac=0.5)
    b = testing.pipeline_report([20000, 30000], tiles_per_ipu=4, memory_frac=[0.5, 0.6])
    out = instances.check(_set(a, b))
    memory, cycles = out["instance-1/training"].findings
    assert out["instance-0/training"].findings == []
    assert (memory.code, cycles.code) == ("INST004", "INST005")
    # 4 tiles per IPU at 60% (IPU1) against 50% of 638,976 bytes
    assert memory.evidence == ("peak IPU memory of training on instance-1: 1,533,544 B; median of the "
                               "other 1 instance(s): 1,277,952 B (flagged above 1%)")
    assert cycles.title == "instance-1: cycles per profiled run 28% above the other instances"
    assert out["instance-1/training"].metrics["cycles_per_run"] == 1535164.0


def test_engine_missing_on_an_instance():
    r = testing.pipeline_report([100, 100], tiles_per_ipu=4)
    inf = testing.pipeline_report([100, 100], tiles_per_ipu=4, mode="inference", name="inference")
    reports = ReportSet([r.replace(instance="instance-0"), r.replace(instance="instance-1"),
                         inf.replace(instance="instance-0")])
    out = instances.check(reports)
    [f] = out["instance-0/inference"].findings
    assert (f.code, f.title) == ("INST001", "Engine 'inference' is missing on 1 instance(s)")
    assert f.evidence == "inference found on instance-0; not on instance-1"


def test_only_instances_runs_just_the_cross_check():
    r = testing.pipeline_report([100, 100], tiles_per_ipu=4)
    result = analyse(_set(r, r), only=["instances"])
    assert result.analyses == ["instances"]
    assert [list(e.outputs) for e in result.engines] == [["instances"], ["instances"]]


# ------------------------------------------------------------------------------ real runs

POPRUN = '''
"""A stand-in for PopRun: start N copies of a command with the OpenMPI rank variables."""
import os, subprocess, sys
n = int(sys.argv[1])
procs = [subprocess.Popen(sys.argv[2:], env={**os.environ, "OMPI_COMM_WORLD_RANK": str(rank),
                                              "OMPI_COMM_WORLD_SIZE": str(n)}) for rank in range(n)]
sys.exit(max(p.wait() for p in procs))
'''

RANKED = '''
import json, os, time, torch, poptorch
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 2)

    def forward(self, x):
        if rank == 1:
            time.sleep(0.03)   # a slow host
        return self.l(x)

opts = poptorch.Options().deviceIterations(2 if rank == 0 else 4)
model = poptorch.inferenceModel(Net(), opts)
for _ in range(4):
    model(torch.randn(4, 4))
print(rank, json.loads(os.environ["POPLAR_ENGINE_OPTIONS"])["autoReport.directory"], flush=True)
'''


def test_two_rank_run_under_one_capture(tmp_path):
    (tmp_path / "poprun.py").write_text(textwrap.dedent(POPRUN))
    (tmp_path / "train.py").write_text(textwrap.dedent(RANKED))
    proc = run_cli("capture", "-o", "out", "--", PY, "poprun.py", "2", PY, "train.py", cwd=tmp_path,
                   env=FAKE_ENV)
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / "out").resolve()
    # each rank's profiles go to its own directory
    assert sorted(proc.stdout.split("\n")[:2]) == [f"0 {out / 'instance-0'}", f"1 {out / 'instance-1'}"]
    for rank in (0, 1):
        doc = json.loads((out / f"instance-{rank}" / "inference" / "popviz-model.json").read_text())
        assert (doc["instance"], doc["process"]["rank"], doc["calls"]["count"]) == (f"instance-{rank}", rank, 4)
    run = json.loads((out / "popviz-run.json").read_text())
    assert [e["path"] for e in run["engines"]] == ["instance-0/inference", "instance-1/inference"]
    reports = popviz.load(out)
    assert reports.labels == ["instance-0/inference", "instance-1/inference"]
    assert reports.instances == ["instance-0", "instance-1"]
    analysed = run_cli("analyse", str(out), "--json")
    doc = json.loads(analysed.stdout)
    assert "instances" in doc["analyses"]
    codes = {e["instance"]: [f["code"] for f in e["findings"] if f["analysis"] == "instances"]
             for e in doc["engines"]}
    assert codes == {"instance-0": [], "instance-1": ["INST002", "INST003"]}
    console = run_cli("analyse", str(out), env={"COLUMNS": "160"}).stdout
    assert "instance-1 runs inference with a different device iterations" in console
    assert "device iterations on instance-1: 4; on instance-0: 2" in console
    # 4 × 30 ms of sleep per call against well under 1 ms: shown as a ratio, not a percentage
    assert "instance-1: median call wall time" in console and "× that of the other instances" in console


def test_one_capture_per_rank_into_one_directory(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(RANKED))
    env = {**os.environ, **FAKE_ENV, "OMPI_COMM_WORLD_SIZE": "2"}
    procs = [subprocess.Popen([PY, "-m", "popviz", "capture", "-o", "out", "--", PY, "train.py"],
                              cwd=tmp_path, env={**env, "OMPI_COMM_WORLD_RANK": str(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    out = (tmp_path / "out").resolve()
    for rank in (0, 1):
        assert results[rank][0] == f"{rank} {out / f'instance-{rank}'}\n"
        run = json.loads((out / f"instance-{rank}" / "popviz-run.json").read_text())
        assert (run["instance"], run["status"]) == (f"instance-{rank}", "succeeded")
        assert [e["path"] for e in run["engines"]] == ["inference"]
    assert popviz.load(out).labels == ["instance-0/inference", "instance-1/inference"]
    # a second capture of rank 0 into the same directory is refused: its instance directory is taken
    again = subprocess.run([PY, "-m", "popviz", "capture", "-o", "out", "--", PY, "-c", "pass"],
                           cwd=tmp_path, env={**env, "OMPI_COMM_WORLD_RANK": "0"},
                           capture_output=True, text=True)
    assert again.returncode == 2 and "instance-0 is not empty" in again.stderr


# ------------------------------------------------------------------------ runs, not instances

def test_separate_runs_in_one_directory_are_not_instances():
    r = testing.pipeline_report([100, 100], tiles_per_ipu=4, gradient_accumulation=4)
    slow = testing.pipeline_report([100, 300], tiles_per_ipu=4, gradient_accumulation=8)
    runs = ReportSet([r.replace(instance="20261122-101500"), slow.replace(instance="20261122-101730")])
    assert instances.check(runs) == {}
    assert "instances" not in analyse(runs).analyses
    # asked for explicitly: said to be not applicable, on every engine
    result = analyse(runs, only=["instances"])
    assert result.analyses == ["instances"]
    for e in result.engines:
        [nc] = e.outputs["instances"].not_checked
        assert nc.reason.startswith("not applicable: this directory holds no multi-instance")
    # a rank recorded at capture time makes an instance whatever the directory is called
    dist = {"distributed": {"process_id": 0, "num_processes": 2}}
    ranked = [x.replace(config=x.cfg.__class__(**{**x.cfg.__dict__, "options": dist})) for x in (r, slow)]
    assert instances.is_instance(ranked[0].replace(instance="rank-a"))
    assert not instances.is_instance(r.replace(instance="rank-a"))


def test_instances_of_two_poprun_runs_are_compared_within_each_run():
    r = testing.pipeline_report([100, 100], tiles_per_ipu=4, gradient_accumulation=4)
    odd = testing.pipeline_report([100, 100], tiles_per_ipu=4, gradient_accumulation=8)
    reports = ReportSet([r.replace(instance="a/instance-0"), r.replace(instance="a/instance-1"),
                         odd.replace(instance="b/instance-0"), odd.replace(instance="b/instance-1")])
    out = instances.check(reports)
    # each run agrees with itself: run b's G = 8 is not compared with run a's G = 4
    assert sorted(out) == ["a/instance-0/training", "a/instance-1/training",
                           "b/instance-0/training", "b/instance-1/training"]
    assert all(not o.findings for o in out.values())
    assert [instances.run_of(x) for x in reports] == ["a", "a", "b", "b"]


def test_two_ordinary_captures_and_the_samples_give_no_instance_finding(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(RANKED).replace('int(os.environ["OMPI_COMM_WORLD_RANK"])', "0")
                      .replace('print(rank, json.loads(os.environ["POPLAR_ENGINE_OPTIONS"])'
                               '["autoReport.directory"], flush=True)', ""))
    for _ in range(2):
        proc = run_cli("capture", "-o", "runs", "--new-run", "--", PY, "train.py", cwd=tmp_path, env=FAKE_ENV)
        assert proc.returncode == 0, proc.stderr
    reports = popviz.load(tmp_path / "runs")
    assert len(reports.instances) == 2 and not any(instances.is_instance(r) for r in reports)
    for path in (str(tmp_path / "runs"), str(ROOT / "sample_reports")):
        doc = json.loads(run_cli("analyse", path, "--json").stdout)
        assert "instances" not in doc["analyses"]
        assert not [f for e in doc["engines"] for f in e["findings"] if f["code"].startswith("INST")]
    # the console groups the engines run by run
    console = run_cli("analyse", str(ROOT / "sample_reports"), env={"COLUMNS": "100"}).stdout
    heads = [line for line in console.splitlines() if line.startswith("run ")]
    assert [h.split()[1] for h in heads] == ["bert_even_split", "bert_pipeline", "bert_planned", "cnn_replicated",
                                             "lightning_pipeline", "mnist_pipeline", "oom_compile", "oom_model"]
    single = run_cli("analyse", str(tmp_path / "runs"), "--only", "instances", env={"COLUMNS": "100"})
    assert single.returncode == 0 and "not applicable" in single.stdout


def test_emulated_two_instance_run_is_still_cross_checked(tmp_path):
    (tmp_path / "poprun.py").write_text(textwrap.dedent(POPRUN))
    (tmp_path / "train.py").write_text(textwrap.dedent(RANKED))
    proc = run_cli("capture", "-o", "out", "--emulate", "--", PY, "poprun.py", "2", PY, "train.py",
                   cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    reports = popviz.load(tmp_path / "out")
    assert all(r.provenance.estimated and instances.is_instance(r) for r in reports)
    doc = json.loads(run_cli("analyse", str(tmp_path / "out"), "--json").stdout)
    assert "instances" in doc["analyses"]
    codes = {e["instance"]: [f["code"] for f in e["findings"] if f["analysis"] == "instances"]
             for e in doc["engines"]}
    # rank 1 runs D = 4 (rank 0: D = 2): its configuration and its cycles per run differ; its
    # 30 ms sleep in forward is the emulator's CPU running the model (on an IPU the forward is
    # compiled), so call times are not compared: an estimate's wall times are not the IPUs'
    assert codes["instance-0"] == [] and codes["instance-1"] == ["INST002", "INST005"]
    not_checked = [n for e in doc["engines"] for n in e["not_checked"] if n["analysis"] == "instances"]
    assert [n["check"] for n in not_checked] == ["median call wall time across instances"]
    assert not_checked[0]["reason"].startswith("estimated by the emulator: its call wall times are this machine's CPU")
    # each instance's rate is its own; the run's is their sum, as a metric a budget can hold
    rates = {e["instance"]: e["metrics"]["throughput"]["samples_per_second"] for e in doc["engines"]}
    runs = {e["metrics"]["instances"]["run_samples_per_second"] for e in doc["engines"]}
    assert runs == {round(rates["instance-0"] + rates["instance-1"], 1)}
    console = " ".join(run_cli("analyse", str(tmp_path / "out"), env={"COLUMNS": "200"}).stdout.split())
    assert " samples/s for this PopRun instance (one of 2: the instances analysis adds up the run)" in console
    assert f"estimated: the whole run (inference): {runs.pop():,.1f} samples/s over 2 instances and 2 replicas" in console
    budget = tmp_path / "budget.toml"
    budget.write_text('[budgets]\n"instances.run_samples_per_second" = ">= 1e9"\n')
    gate = run_cli("check", str(tmp_path / "out"), "--budget", str(budget))
    assert gate.returncode == 1 and "instance-0/inference  instances.run_samples_per_second" in gate.stdout
    # the table still shows them, labelled as the emulator's CPU
    table = next(e.outputs["instances"].table for e in popviz.analyse(reports).engines
                 if "instances" in e.outputs and e.outputs["instances"].table is not None)
    assert "median call ms (emulator's CPU)" in table.columns and "median_call_ms" not in table.columns


@pytest.mark.parametrize("env,message", [
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"},
     "OMPI_COMM_WORLD_RANK=2 is not a rank of OMPI_COMM_WORLD_SIZE=2 (ranks are 0 to OMPI_COMM_WORLD_SIZE - 1)"),
    ({"OMPI_COMM_WORLD_RANK": "1"},
     "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not: a launcher sets both (unset "
     "OMPI_COMM_WORLD_RANK for a single run)"),
    ({"PMI_RANK": "one", "PMI_SIZE": "2"}, "PMI_RANK='one' and PMI_SIZE='2' must be whole numbers"),
])
def test_capture_refuses_a_launcher_environment_that_names_no_rank(tmp_path, env, message):
    # such a process used to be filed as a single run (rank 2 of 2 wrote instance-2 with no instance)
    (tmp_path / "train.py").write_text("print('ran')\n")
    proc = run_cli("capture", "-o", "out", "--", PY, "train.py", cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert unwrapped(proc.stderr) == f"popviz: error: launcher environment: {message}\n"
    assert not (tmp_path / "out").exists()


def test_one_rank_of_a_per_rank_capture_points_at_the_run(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(RANKED))
    proc = run_cli("capture", "-o", "out", "--emulate", "--calls", "1", "--", PY, "train.py", cwd=tmp_path,
                   env={"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr[proc.stderr.rindex("next: "):]  # the last line, with its continuations at 100 columns
    assert " ".join(last.split()) == ("next: popviz analyse out (every instance, with the cross-instance "
                                      "checks; out/instance-1 alone has none)")


def test_an_instance_that_failed_before_any_engine_is_a_warning(tmp_path):
    # one rank of a per-rank capture fails before compiling: analysed alone, the run looked whole
    (tmp_path / "train.py").write_text(textwrap.dedent(RANKED))
    (tmp_path / "crash.py").write_text(textwrap.dedent("""\
        import os, runpy, sys
        if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
            sys.exit("rank 1: cannot open the data set")
        runpy.run_path("train.py", run_name="__main__")
    """))
    for rank in ("0", "1"):
        run_cli("capture", "-o", "out", "--emulate", "--calls", "1", "--", PY, "crash.py", cwd=tmp_path,
                env={"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"})
    warning = ("instance-1 exited with code 1 before any engine was captured, so the run's other instances are "
               "analysed without it: see out/instance-1/capture.log")
    assert popviz.load(tmp_path / "out").warnings == [warning.replace("out/", f"{tmp_path / 'out'}/")]
    doc = json.loads(run_cli("analyse", "out", "--json", cwd=tmp_path).stdout)
    assert doc["warnings"] == [warning]


def test_the_ranks_of_one_new_run_share_its_directory_and_compare_refuses_two_runs(tmp_path):
    # capture --new-run per rank: rank 1 joins the directory rank 0 just made (it made a second
    # run, "-2", when both started in one second); a directory holding that and an earlier
    # per-rank run is two runs for compare
    (tmp_path / "train.py").write_text(textwrap.dedent(RANKED))

    def capture(*extra):
        for rank in ("0", "1"):
            proc = run_cli("capture", "-o", "out", *extra, "--emulate", "--calls", "1", "--", PY, "train.py",
                           cwd=tmp_path, env={"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": "2",
                                              "OMP_NUM_THREADS": "1"})
            assert proc.returncode == 0, proc.stderr

    capture()
    capture("--new-run")
    [new] = [p for p in (tmp_path / "out").iterdir() if not p.name.startswith("instance-")]
    assert sorted(p.name for p in new.iterdir()) == ["instance-0", "instance-1"]
    assert_one_line_error(run_cli("compare", str(new), "out", cwd=tmp_path), "out holds 2 captured runs",
                          f"the newest is out/{new.name}")
    assert run_cli("compare", str(new), str(new), cwd=tmp_path).returncode == 0
