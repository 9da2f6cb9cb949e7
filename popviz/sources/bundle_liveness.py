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


LIVENESS_READ_BYTES = 2**26
"""About how many bytes of liveness columns are decoded at once."""


def read_liveness_file(parquet_file: Any, meta: dict[str, Any]) -> LivenessTable | None:
    """The table read a few columns at a time from an open ``pyarrow.parquet.ParquetFile`` into
    its NumPy arrays (10⁶ steps × 64 IPUs: the 512 MiB of the table, never a pandas frame of it
    as well); None when a column is not of the integer or string type this needs (the caller
    then reads the frame and :func:`read_liveness` names what is wrong)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    ipus = meta.get("ipus") or []
    if not isinstance(ipus, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in ipus):
        return None
    schema = parquet_file.schema_arrow
    numeric = ["total_bytes", *(f"ipu{k}_bytes" for k in ipus)]
    if "program" not in schema.names or any(c not in schema.names or not pa.types.is_integer(schema.field(c).type)
                                            for c in numeric):
        return None
    ptype = schema.field("program").type
    if not (pa.types.is_string(ptype) or pa.types.is_large_string(ptype)
            or (pa.types.is_dictionary(ptype) and pa.types.is_string(ptype.value_type))):
        return None
    n = parquet_file.metadata.num_rows
    total = np.empty(n, dtype="int64")
    # Column-major: each IPU's series is contiguous, as the file stores it (filled column by
    # column without striding; each IPU's peak is then a contiguous argmax).
    per = np.empty((n, len(ipus)), dtype="int64", order="F") if ipus else None
    codes = np.empty(n, dtype="int64")
    index: dict[str, int] = {}
    # A few columns per read (Arrow decodes them on its threads; ≈64 MiB held beside the
    # arrays), each copied chunk by chunk into its slot: 10⁶ steps × 64 IPUs in ≈0.6× the CPU
    # of reading batches of rows across every column (docs/performance.md).
    group = max(1, min(16, LIVENESS_READ_BYTES // max(1, 8 * n)))
    targets = [total] + ([per[:, j] for j in range(len(ipus))] if ipus else [])
    for g in range(0, len(numeric), group):
        names = numeric[g:g + group]
        table = parquet_file.read(columns=names)
        for name, target in zip(names, targets[g:g + group], strict=True):
            col = table.column(name)
            if col.null_count:
                raise ModelError(f"liveness column {name} has missing values")
            at = 0
            for chunk in col.chunks:
                target[at:at + len(chunk)] = chunk.to_numpy(zero_copy_only=False)
                at += len(chunk)
        del table
    prog = parquet_file.read(columns=["program"]).column("program")
    if prog.null_count:
        raise ModelError("liveness column program has missing values")
    at = 0
    for chunk in prog.chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = pc.dictionary_encode(chunk)
        lut = np.array([index.setdefault(str(v), len(index)) for v in chunk.dictionary.to_pylist()],
                       dtype="int64")
        codes[at:at + len(chunk)] = lut[chunk.indices.to_numpy(zero_copy_only=False)] if len(lut) else 0
        at += len(chunk)
    del prog
    always = meta.get("always_live_bytes") or {}
    labels = meta.get("labels") or []
    notes = meta.get("notes") or []
    if not isinstance(always, dict):
        raise ModelError("liveness always_live_bytes must be an object")
    if not isinstance(labels, list) or not isinstance(notes, list):
        raise ModelError("liveness labels and notes must be lists")
    programs = pd.Categorical.from_codes(codes, categories=pd.Index(list(index), dtype="str"))
    return LivenessTable(programs=programs, total_bytes=total, ipu_bytes=per, ipus=tuple(ipus),
                         always_live_bytes={int(k): v for k, v in always.items()},
                         labels=labels_from(labels), notes=tuple(str(n) for n in notes))
