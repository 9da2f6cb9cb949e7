from __future__ import annotations

import pandas as pd
import pytest

from popviz import testing
from popviz.model import (
    ExecutionTable,
    HostIO,
    MemoryTable,
    ModelConfig,
    ModelError,
    Provenance,
    Report,
    ReportSet,
    Stage,
    Target,
)


def test_target_defaults_and_bytes_per_ipu():
    t = Target("Mk2", num_ipus=8, tiles_per_ipu=1472, bytes_per_tile=638_976, clock_hz=1.33e9,
               num_replicas=2)
    assert t.ipus_per_replica == 4
    assert t.bytes_per_ipu == 940_572_672
    assert t.cycles_to_seconds(1_330_000) == pytest.approx(0.001)


@pytest.mark.parametrize("field,value", [("num_ipus", 0), ("tiles_per_ipu", -1), ("clock_hz", 0),
                                         ("bytes_per_tile", 1.5)])
def test_target_rejects_bad_values(field, value):
    kwargs = dict(architecture="Mk2", num_ipus=1, tiles_per_ipu=1, bytes_per_tile=1, clock_hz=1.0)
    kwargs[field] = value
    with pytest.raises(ModelError, match=field):
        Target(**kwargs)


def test_config_effective_output_mode():
    assert ModelConfig(mode="training", output_mode="Default").effective_output_mode == "Final"
    assert ModelConfig(mode="inference", output_mode="Default").effective_output_mode == "All"
    assert ModelConfig(mode="inference", output_mode="Sum").effective_output_mode == "Sum"
    assert ModelConfig(output_mode="Default").effective_output_mode is None
    with pytest.raises(ModelError, match="output_mode"):
        ModelConfig(output_mode="Everything")
    with pytest.raises(ModelError, match="gradient_accumulation"):
        ModelConfig(gradient_accumulation=0)


def test_config_normalises_json_values():
    c = ModelConfig(stages=[{"index": 0, "ipu": 1, "blocks": ["a"]}],
                    available_memory_proportion={"1": 0.2}, options={"t": (1, 2)})
    assert c.stages == (Stage(0, 1, ("a",)),)
    assert c.available_memory_proportion == {1: 0.2}
    assert c.options == {"t": [1, 2]}
    with pytest.raises(ModelError, match="JSON"):
        ModelConfig(options={"x": object()})


def test_memory_table_coerces_and_sums_per_ipu():
    frame = pd.DataFrame({"ipu": [0, 0, 1], "tile": [0, 1, 0],
                          "total_bytes_including_gaps": [10, 20, 30],
                          "total_bytes_excluding_gaps": [9, 19, 29], "always_live_bytes": [4, 4, 4],
                          "not_always_live_bytes": [5, 15, 25], "overflow_bytes": [0, 0, 1],
                          "cat_variable_bytes": [1, 2, 3]})
    m = MemoryTable(frame)
    assert m.categories == ["variable"]
    assert str(m.frame["ipu"].dtype) == "int32"
    per = m.per_ipu()
    assert per["total_bytes_including_gaps"].tolist() == [30, 30]
    assert per["overflow_bytes"].tolist() == [0, 1]
    with pytest.raises(ModelError, match="unknown column"):
        MemoryTable(frame.assign(mem=1))
    with pytest.raises(ModelError, match="lacks column"):
        MemoryTable(frame.drop(columns="overflow_bytes"))


def test_execution_table_requires_known_runs_and_sums_types():
    steps = pd.DataFrame({"run": [0, 0, 0], "step": [0, 1, 1], "program": ["a", "b", "b"],
                          "program_type": ["OnTileExecute", "Sync", "Sync"], "ipu": [0, 0, 1],
                          "cycles": [100, 5, 7]})
    e = ExecutionTable(steps)
    assert e.runs["name"].tolist() == ["run0"]
    assert e.steps["start_cycle"].isna().all()
    by = e.cycles_by_type()
    assert by.loc[0, "OnTileExecute"] == 100 and by.loc[1, "Sync"] == 7 and by.loc[1, "OnTileExecute"] == 0
    with pytest.raises(ModelError, match="run"):
        ExecutionTable(steps, pd.DataFrame({"run": [3], "name": ["x"]}))


def test_report_parts_and_absence():
    r = testing.pipeline_report([100, 200], execution=False, with_host_io=False)
    assert r.present == ["target", "memory", "config"]
    assert r.missing == ["execution", "host_io"]
    empty = Report("x", Provenance("bundle"), config=ModelConfig(), host_io=HostIO())
    assert empty.missing == ["target", "memory", "execution", "config", "host_io"]
    assert empty.cfg.num_stages == 0


def test_report_set_lookup():
    a = testing.pipeline_report([1, 2], name="training").replace(instance="instance-0")
    b = testing.pipeline_report([1, 2], name="training").replace(instance="instance-1")
    c = testing.pipeline_report([1, 2], name="inference", mode="inference")
    rs = ReportSet([a, b, c])
    assert rs.labels == ["instance-0/training", "instance-1/training", "inference"]
    assert rs["inference"] is c
    assert rs["instance-1/training"] is b
    assert rs.instances == ["instance-0", "instance-1"]
    with pytest.raises(KeyError, match="one per instance"):
        rs["training"]
    with pytest.raises(KeyError, match="no engine named"):
        rs["nope"]
    assert rs.summary()["has_execution"].tolist() == [True, True, True]


def test_columns_already_of_the_declared_dtype_are_not_copied():
    import numpy as np

    steps = testing.pipeline_report([1000, 3000]).execution.steps.drop(columns="start_cycle")
    table = ExecutionTable(steps)
    for col in ("run", "ipu", "cycles"):
        assert np.shares_memory(table.steps[col].to_numpy(), steps[col].to_numpy())
    assert table.steps["start_cycle"].dtype == "Int64" and table.steps["start_cycle"].isna().all()
    assert table.steps.equals(ExecutionTable(steps.assign(start_cycle=None)).steps)


def test_runs_are_listed_from_steps_in_any_order():
    steps = pd.DataFrame({"run": [7, 2, 7, 0], "step": 0, "program": "p", "program_type": "Sync",
                          "ipu": 0, "cycles": 1})
    assert ExecutionTable(steps).runs["run"].tolist() == [0, 2, 7]
    with pytest.raises(ModelError, match=r"run\(s\) \[2, 7\] missing from runs"):
        ExecutionTable(steps, runs=pd.DataFrame({"run": [0], "name": ["r0"]}))
