"""Checks at the boundary of the CI files (baselines, histories): what another person, another
machine or an older popviz wrote is checked once, like a bundle, before any figure is shown.

A metric value must be a finite number within what its unit allows (bytes, cycles, counts and
seconds non-negative and below 2^62, counts whole; percentages of a call's time 0-100; memory
percentages non-negative, since an out-of-memory compile uses more than 100%); a metric name must have the
shape of one (``pipeline.stage2.cycles_per_micro_batch``); a finding has a code, a known
severity and a title; a configuration holds the fields popviz writes with their types. Anything
else raises the caller's error with one line naming the field.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

from popviz.ci.metrics import definition
from popviz.errors import brief
from popviz.model.numbers import finite_float

MAX_VALUE = float(2**62)
"""No byte, cycle or count figure of a real run comes near this (a 2^62-cycle run lasts 150 years)."""
MAX_NAME_CHARS = 1000
"""Engine, instance, layer and block names, labels and titles longer than this are not names."""
MAX_ENGINES = 10_000
MAX_METRICS = 100_000
METRIC_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+")
FINDING_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,15}")
SEVERITIES = ("info", "warning", "error")
SHARES = ("pipeline.ramp_efficiency_pct", "pipeline.utilisation_pct", "host_io.stream_copy_pct")
"""Percentages of a call's time: 0-100 (memory percentages can pass 100 when memory overflows)."""

Fail = Callable[[str], Exception]


@functools.lru_cache(maxsize=4096)
def metric_range(name: str) -> tuple[float, float]:
    """The values ``name`` can take: (lowest, highest) (remembered by name: a history checks
    every one of its values)."""
    unit = definition(name).unit
    if unit == "pct":
        return (0.0, 100.0) if name in SHARES else (0.0, MAX_VALUE)
    if unit == "ratio":
        return (1.0, MAX_VALUE) if name == "pipeline.imbalance_ratio" else (0.0, MAX_VALUE)
    return (0.0, MAX_VALUE)


def known_metric(name: Any, fail: Fail, where: str) -> bool:
    """Whether ``name`` is a metric this popviz knows; False for a well-formed name it does not
    (a newer popviz's metric: not compared); ``fail`` for anything that is not a metric name."""
    state = _name_state(name) if isinstance(name, str) else None
    if state is None:
        raise fail(f"has an invalid metric name ({brief(name)}) in {where}: metric names are dotted "
                   "lower-case words, like pipeline.imbalance_ratio")
    return state


@functools.lru_cache(maxsize=4096)
def _name_state(name: str) -> bool | None:
    """None: not a metric name; False: well-formed, unknown to this popviz; True: known."""
    if len(name) > 200 or not METRIC_NAME.fullmatch(name):
        return None
    try:
        definition(name)
    except KeyError:
        return False
    return True


def metric_value(name: str, value: Any, fail: Fail, where: str) -> float:
    """``value`` of metric ``name`` as a float, or ``fail`` naming the metric and ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"has a non-numeric value for metric {name!r} of {where}")
    if isinstance(value, int) and abs(value) > MAX_VALUE:
        raise fail(f"has an impossible value for metric {name!r} of {where} ({brief(value)})")
    v = float(value)
    if not math.isfinite(v):
        raise fail(f"has a value that is not finite for metric {name!r} of {where} ({v})")
    lo, hi = metric_range(name)
    unit = definition(name).unit
    if unit == "count" and not v.is_integer():
        raise fail(f"has an impossible value for metric {name!r} of {where}: {v:g} (a count is a whole "
                   "number)")
    if not lo <= v <= hi:
        bound = f"{lo:g} to {hi:g}" if hi < MAX_VALUE else f"{lo:g} to 2^62"
        raise fail(f"has an impossible value for metric {name!r} of {where}: {v:g} {unit} (must be "
                   f"{bound})")
    return v


def metrics(doc: Any, fail: Fail, where: str) -> dict[str, float]:
    """A ``{name: value}`` table checked by :func:`metric_value`; unknown well-formed names are
    left out (a newer popviz's metrics are not compared), their values still finite numbers."""
    if not isinstance(doc, dict):
        raise fail(f"has metrics that are not a table in {where}")
    if len(doc) > MAX_METRICS:
        raise fail(f"has more than {MAX_METRICS:,} metrics in {where}")
    out = {}
    for k, v in doc.items():
        if known_metric(k, fail, where):
            out[k] = metric_value(k, v, fail, where)
        elif finite_float(v) is None or abs(v) > MAX_VALUE:  # a 400-digit integer is no float either
            raise fail(f"has a value that is not a finite number for metric {k!r} of {where} ({brief(v)})")
    return out


def name(value: Any, fail: Fail, field: str, *, optional: bool = False) -> str | None:
    """A name or label: a non-empty string of at most MAX_NAME_CHARS (None when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise fail(f"has an invalid {field} ({brief(value)}; expected a name)")
    return value


def findings(doc: Any, fail: Fail, where: str) -> list[dict[str, str]]:
    """A list of findings: each with a code (``PIPE001``), a known severity and a title."""
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise fail(f"has findings that are not a list in {where}")
    out = []
    for k, f in enumerate(doc):
        if not isinstance(f, dict):
            raise fail(f"has a finding #{k} that is not an object in {where}")
        code, severity, title = f.get("code"), f.get("severity"), f.get("title")
        if not isinstance(code, str) or not FINDING_CODE.fullmatch(code):
            raise fail(f"has finding #{k} of {where} with an invalid code ({brief(code)})")
        if severity not in SEVERITIES:
            raise fail(f"has finding {code} of {where} with an unknown severity ({brief(severity)}; "
                       f"expected {', '.join(SEVERITIES)})")
        name(title, fail, f"title of finding {code} of {where}")
        out.append({"code": code, "severity": severity, "title": title})
    return out


CONFIG_STRINGS = ("mode", "execution_strategy", "output_mode", "target", "inputs")
CONFIG_COUNTS = ("device_iterations", "gradient_accumulation", "replication_factor")


def config(doc: Any, fail: Fail, where: str) -> dict[str, Any]:
    """The configuration popviz records beside the metrics (metrics.configuration): strings,
    positive counts, ``stages`` a list of strings and ``layer_ipus`` a table of IPU indices;
    other (newer) fields only as plain values."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise fail(f"has a configuration that is not an object in {where}")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        field = f"configuration field {brief(key)} of {where}"
        if key in CONFIG_STRINGS:
            name(value, fail, field, optional=True)
        elif key in CONFIG_COUNTS:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 1 <= value <= 2**31):
                raise fail(f"has an invalid {field} ({brief(value)}; expected a positive integer)")
        elif key == "stages":
            if not isinstance(value, list) or len(value) > 10_000:
                raise fail(f"has an invalid {field} ({brief(value)}; expected a list of stages)")
            for s in value:
                name(s, fail, f"stage in {field}")
        elif key == "layer_ipus":
            if not isinstance(value, dict) or len(value) > 100_000:
                raise fail(f"has an invalid {field} (expected a table of layer: IPU)")
            for layer, ipu in value.items():
                name(layer, fail, f"layer in {field}")
                if isinstance(ipu, bool) or not isinstance(ipu, int) or not 0 <= ipu < 2**16:
                    raise fail(f"has an invalid IPU for layer {brief(layer)} in {field} ({brief(ipu)})")
        elif not isinstance(key, str) or len(key) > 100:
            raise fail(f"has an invalid configuration field name in {where}")
        elif (value is not None and not isinstance(value, (str, int, float, bool))) or \
                (isinstance(value, str) and len(value) > MAX_NAME_CHARS):
            raise fail(f"has an invalid {field} (expected a plain value)")
        elif isinstance(value, float) and not math.isfinite(value):
            raise fail(f"has an invalid {field} (not finite)")
        out[key] = value
    return out
