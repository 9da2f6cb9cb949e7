"""The liveness table in a bundle: ``liveness.parquet`` (one row per program step: ``program``,
``total_bytes`` and one ``ipu<k>_bytes`` column per IPU) and the ``liveness`` metadata (IPUs,
always-live bytes, labels of the peak steps, notes); docs/format.md."""

from __future__ import annotations

from typing import Any

from popviz.model import LivenessTable, ModelError
from popviz.model.liveness import labels_from


def liveness_frame(table: LivenessTable):  # -> pandas.DataFrame
    import pandas as pd

    data: dict[str, Any] = {"program": table.programs, "total_bytes": table.total_bytes}
    for j, k in enumerate(table.ipus):
        data[f"ipu{k}_bytes"] = table.ipu_bytes[:, j]
    return pd.DataFrame(data, copy=False)


def liveness_meta(table: LivenessTable, file_name: str) -> dict[str, Any]:
    return {"file": file_name, "rows": len(table), "ipus": list(table.ipus),
            "always_live_bytes": {str(k): v for k, v in table.always_live_bytes.items()},
            "labels": [x.to_dict() for x in table.labels], "notes": list(table.notes)}


def read_liveness(frame, meta: dict[str, Any]) -> LivenessTable:
    """The table from its Parquet frame and metadata (a ModelError/ValueError for what does not
    match: the bundle reader names the file)."""
    import numpy as np
    import pandas as pd

    ipus = meta.get("ipus") or []
    if not isinstance(ipus, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in ipus):
        raise ModelError("liveness ipus must be a list of integers")
    for name in ("program", "total_bytes", *(f"ipu{k}_bytes" for k in ipus)):
        if name not in frame.columns:
            raise ModelError(f"liveness table lacks column {name}")
    programs = frame["program"]
    if programs.isna().any():
        raise ModelError("liveness column program has missing values")
    programs = pd.Categorical(programs.astype(str))
    per = (np.column_stack([frame[f"ipu{k}_bytes"].to_numpy() for k in ipus]) if ipus else None)
    always = meta.get("always_live_bytes") or {}
    if not isinstance(always, dict):
        raise ModelError("liveness always_live_bytes must be an object")
    labels = meta.get("labels") or []
    notes = meta.get("notes") or []
    if not isinstance(labels, list) or not isinstance(notes, list):
        raise ModelError("liveness labels and notes must be lists")
    return LivenessTable(programs=programs, total_bytes=frame["total_bytes"].to_numpy(), ipu_bytes=per,
                         ipus=tuple(ipus), always_live_bytes={int(k): v for k, v in always.items()},
                         labels=labels_from(labels), notes=tuple(str(n) for n in notes))
