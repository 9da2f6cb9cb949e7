"""popviz.model.numbers: "a finite number" for values read from files, huge JSON integers included."""

from __future__ import annotations

import pytest

from popviz import testing
from popviz.errors import CorruptReportError
from popviz.model import CallStats, HostIO
from popviz.model.numbers import finite_float
from popviz.sources.validate import check_report


def test_finite_float():
    assert finite_float(3) == 3.0 and finite_float(-0.5) == -0.5 and finite_float(10**300) == 1e300
    for bad in (10**400, -(10**400), float("nan"), float("inf"), True, False, "1", None, [1.0]):
        assert finite_float(bad) is None


def test_a_400_digit_call_statistic_is_refused_in_one_line_not_crashed_on():
    stats = (CallStats("wall_seconds", 7, 10**400, 0.08, 0.12, 0.1, 0.11, None),)
    report = testing.single_ipu_report(5000).replace(host_io=HostIO(tensors=(), calls=7, call_stats=stats))
    with pytest.raises(CorruptReportError, match=r"wall_seconds.sum must be a finite non-negative number"):
        check_report(report, "run/training")
