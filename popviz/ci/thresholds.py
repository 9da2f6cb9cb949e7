"""Thresholds for comparisons (``METRIC:SPEC``) and budgets (``METRIC = "<= 85"``), their
defaults, and the ``[tool.popviz]`` configuration they can come from.

Threshold forms: ``5%`` (relative to the base), ``+2pp`` (percentage points, for ``_pct``
metrics), ``10MiB`` / ``512KiB`` / ``100B`` (bytes), ``1000cycles``, ``0.5s``, or a plain number
in the metric's own unit (``0``: any change in the worse direction fails). METRIC may be a glob
(``memory.*``). Rules apply in order — defaults, then the configuration file, then the command
line — and the last rule that matches a metric wins.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from popviz.ci.metrics import definition
from popviz.errors import UsageError, shown

UNITS = {"b": ("bytes", 1), "kib": ("bytes", 2**10), "mib": ("bytes", 2**20), "gib": ("bytes", 2**30),
         "kb": ("bytes", 1e3), "mb": ("bytes", 1e6), "gb": ("bytes", 1e9), "cycles": ("cycles", 1),
         "s": ("seconds", 1), "ms": ("seconds", 1e-3), "pp": ("pct", 1)}


@dataclass(frozen=True)
class Threshold:
    spec: str
    relative_pct: float | None = None
    absolute: float | None = None
    unit: str | None = None
    """The unit an absolute threshold is in (None: the metric's own unit)."""

    def exceeded(self, base: float, new: float) -> bool:
        delta = abs(new - base)
        if self.relative_pct is not None:
            if base == 0:
                return delta > 0
            return delta / abs(base) * 100 > self.relative_pct + 1e-12
        return delta > (self.absolute or 0.0) + 1e-12


MAX_THRESHOLD = 1e15
"""A threshold above this (in any unit) can never be exceeded by a real figure."""


def _shown(spec: Any) -> str:
    from popviz.errors import brief

    return brief(spec)


def parse_threshold(spec: str, where: str = "") -> Threshold:
    text = str(spec).strip()
    m = re.fullmatch(r"\+?(\d+(?:\.\d+)?)\s*([A-Za-z%]*)", text)
    if not m:
        raise UsageError(f"threshold {_shown(spec)}{where} is not a number with an optional unit "
                         "(5%, +2pp, 10MiB, 1000cycles, 0.5s, 0)")
    value, unit = float(m.group(1)), m.group(2).lower()
    if not math.isfinite(value) or value > MAX_THRESHOLD:
        raise UsageError(f"threshold {_shown(spec)}{where} is too large to ever be exceeded: a gate that cannot "
                         "fail is not a gate; use a number below 1e15")
    if unit == "%":
        return Threshold(text, relative_pct=value)
    if unit == "":
        return Threshold(text, absolute=value)
    if unit not in UNITS:
        raise UsageError(f"threshold {_shown(spec)}{where} has an unknown unit {m.group(2)!r}; use %, pp, B, KiB, "
                         "MiB, GiB, cycles, s or ms")
    kind, scale = UNITS[unit]
    return Threshold(text, absolute=value * scale, unit=kind)


SHARE_METRICS = ("pipeline.ramp_efficiency_pct", "pipeline.utilisation_pct", "host_io.stream_copy_pct")
"""Shares of a call's time: they move when another part of the call gets faster (a shorter call
makes the same host copies a larger share), so their default is looser than memory's."""


def default_threshold(name: str) -> str:
    """Tight for deterministic figures, looser for shares of the call, tolerant for wall times."""
    d = definition(name)
    if not d.deterministic:
        return "25%"
    if d.unit == "count":
        return "0"
    if name in SHARE_METRICS:
        return "+5pp"
    if d.unit == "pct":
        return "+1pp"
    return "1%"


@dataclass(frozen=True)
class Rule:
    pattern: str
    threshold: Threshold
    origin: str


def parse_rule(text: str, origin: str) -> Rule:
    pattern, sep, spec = str(text).rpartition(":")
    if not sep or not pattern.strip() or not _BUDGET_PATTERN.fullmatch(pattern.strip()):
        raise UsageError(f"--fail {_shown(text)} must be METRIC:THRESHOLD, e.g. pipeline.imbalance_ratio:5% or memory.*:+2pp")
    return Rule(pattern.strip(), parse_threshold(spec, f" for {pattern.strip()}"), origin)


UNIT_WORDS = {"pct": "percentage points (pp)", "bytes": "bytes (B, KiB, MiB, GiB)", "cycles": "cycles",
              "seconds": "seconds (s, ms)", "samples_per_second": "samples/s", "count": "a count",
              "ratio": "a ratio"}
"""How a message names a metric's or an absolute threshold's unit."""


def threshold_for(name: str, rules: list[Rule]) -> Threshold:
    """The threshold the last matching rule gives ``name`` (else its default). A wildcard rule
    with an absolute unit applies to the metrics in that unit only (``memory.*:+2pp`` gates the
    memory percentages, not the bytes); a rule naming this one metric in another unit is refused."""
    chosen = parse_threshold(default_threshold(name))
    unit = definition(name).unit
    for rule in rules:
        if fnmatch.fnmatchcase(name, rule.pattern):
            t = rule.threshold
            if t.unit is not None and t.unit != unit:
                if any(c in rule.pattern for c in "*?["):
                    continue
                raise UsageError(f"threshold {t.spec!r} ({rule.origin}) is in {UNIT_WORDS.get(t.unit, t.unit)} but "
                                 f"{name} is in {UNIT_WORDS.get(unit, unit)}; use a relative threshold (5%) or the "
                                 "metric's unit")
            chosen = t
    return chosen


def check_unit_rules(rules: list[Rule], names: Iterable[str]) -> None:
    """Refuse a wildcard rule with an absolute unit that matches metrics but none in its unit (it
    would gate nothing: ``pipeline.*:10MiB``)."""
    names = list(names)
    for rule in rules:
        t = rule.threshold
        if t.unit is None or not any(c in rule.pattern for c in "*?["):
            continue
        matched = [n for n in names if fnmatch.fnmatchcase(n, rule.pattern)]
        units = {definition(n).unit for n in matched}
        if matched and t.unit not in units:
            words = ", ".join(sorted(UNIT_WORDS.get(u, u) for u in units))
            raise UsageError(f"threshold {t.spec!r} ({rule.origin}) is in {UNIT_WORDS.get(t.unit, t.unit)} but the "
                             f"metrics {rule.pattern} matches are in {words}; use a relative threshold (5%) or "
                             "one of their units")


# ------------------------------------------------------------------------------- budgets

@dataclass(frozen=True)
class Budget:
    pattern: str
    op: str
    limit: float
    text: str
    unit: str | None = None
    """The unit the limit was written in (``<= 30MiB``: bytes), None for a bare number."""

    def holds(self, value: float) -> bool:
        return {"<=": value <= self.limit, "<": value < self.limit, ">=": value >= self.limit,
                ">": value > self.limit, "==": value == self.limit}[self.op]


def parse_budget(pattern: str, text: Any, origin: str) -> Budget:
    if isinstance(text, dict):  # pipeline.cycles = "..." unquoted: TOML made a table of it
        raise UsageError(f"budget {_shown(pattern)} in {origin} is a table, not a limit: quote a metric name "
                         "that has dots, e.g. \"pipeline.imbalance_ratio\" = \"<= 1.2\"")
    m = re.fullmatch(r"\s*(<=|>=|<|>|==)\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)\s*", str(text))
    if not m or isinstance(text, bool):
        raise UsageError(f"budget {pattern} = {text!r} in {origin} must be an operator and a number, "
                         "e.g. \"<= 85\" (a unit may follow: \"<= 30MiB\", \"<= 2ms\")")
    suffix = m.group(3).lower()
    if suffix and suffix not in UNITS and suffix != "%":
        raise UsageError(f"budget {pattern} = {text!r} in {origin} has an unknown unit {m.group(3)!r}; use %, B, "
                         "KiB, MiB, GiB, KB, MB, GB, cycles, s or ms")
    kind, scale = ("pct", 1) if suffix in ("%", "pp") else UNITS.get(suffix, (None, 1))
    limit = float(m.group(2)) * scale
    if not math.isfinite(limit) or abs(limit) > MAX_THRESHOLD:
        raise UsageError(f"budget {pattern} in {origin} has a limit no figure can reach ({m.group(2)[:40]}); "
                         "a gate that cannot fail is not a gate")
    if not _BUDGET_PATTERN.fullmatch(pattern):
        raise UsageError(f"budget {_shown(pattern)} in {origin} is not a metric name or glob (e.g. "
                         "memory.*.used_pct); docs/ci.md lists the names")
    return Budget(pattern, m.group(1), limit, f"{m.group(1)} {m.group(2)}{m.group(3)}", kind)


_BUDGET_PATTERN = re.compile(r"[a-z0-9_.*?\[\]!{}-]{1,200}")


def cannot_fail(budget: Budget, name: str) -> bool:
    """Whether ``budget`` holds for every value metric ``name`` can take (e.g. ``<= 100`` on a
    share of time, ``>= 0`` on bytes): such a budget checks nothing."""
    from popviz.ci.validate import metric_range

    lo, hi = metric_range(name)
    return budget.holds(lo) and budget.holds(hi) and budget.op != "=="


def cannot_pass(budget: Budget, name: str) -> bool:
    """Whether ``budget`` breaks for every value metric ``name`` can take (e.g. ``<= -5`` on
    cycles, ``> 100`` on a share of time): no run can meet it, so the budget itself is wrong."""
    from popviz.ci.validate import metric_range

    lo, hi = metric_range(name)
    limit = budget.limit
    return {"<=": limit < lo, "<": limit <= lo, ">=": limit > hi, ">": limit >= hi,
            "==": not lo <= limit <= hi}[budget.op]


# ------------------------------------------------------------------------------- configuration

@dataclass
class Config:
    fail: list[Rule]
    ignore: list[str]
    budgets: list[Budget]
    origin: str | None


MAX_TOML_BYTES = 4 * 2**20
"""A configuration or budgets file larger than this is not one."""


def _read_toml(path: Path) -> dict[str, Any]:
    """The TOML document in ``path`` (a regular file of at most MAX_TOML_BYTES); one-line errors."""
    import tomllib

    from popviz.errors import PopvizError
    from popviz.fileio import read_regular_bytes

    try:
        text = read_regular_bytes(path, MAX_TOML_BYTES).decode("utf-8")
    except PopvizError as exc:
        raise UsageError(exc.message) from None
    except UnicodeDecodeError:
        raise UsageError(f"{shown(path)} is not UTF-8 text, so not TOML") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{shown(path)} is not valid TOML ({exc}){_toml_hint(text, exc)}") from None
    except RecursionError:
        raise UsageError(f"{shown(path)} nests tables or arrays too deeply to be a configuration") from None


def _toml_hint(text: str, exc: Exception) -> str:
    """How to fix the usual slip: a limit or threshold written bare (``= <= 85``) where TOML needs a
    string (``= "<= 85"``)."""
    import re

    found = re.search(r"at line (\d+)", str(exc))
    lines = text.splitlines()
    if not found or not 0 < int(found.group(1)) <= len(lines):
        return ""
    line = lines[int(found.group(1)) - 1]
    bare = re.search(r"=\s*([<>]=?\s*[^\"'#]+?)\s*(#.*)?$", line)
    if not bare:
        return ""
    return (f"; a limit or threshold is a quoted string: {line[:bare.start(1)]}\"{bare.group(1)}\" "
            "(docs/ci.md)")


def _popviz_table(doc: dict[str, Any], default: Any) -> Any:
    """``doc["tool"]["popviz"]`` (``default`` when absent; a ``tool`` that is not a table too)."""
    tool = doc.get("tool")
    return tool.get("popviz", default) if isinstance(tool, dict) else default


CONFIG_KEYS = ("fail", "ignore", "budgets")
"""What ``[tool.popviz]`` may hold."""


def load_config(path: str | None = None, *, cwd: Path | None = None) -> Config:
    """``--config FILE`` (its ``[tool.popviz]`` table, or the whole file), else ``pyproject.toml``'s
    ``[tool.popviz]`` in the working directory, else nothing."""
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise UsageError(f"{shown(p)} does not exist; pass --config with a TOML file")
        doc = _read_toml(p)
        table = _popviz_table(doc, doc)
        whole = table is doc  # no [tool.popviz]: the file's top level is the table
        origin = shown(p)
    else:
        p = (cwd or Path.cwd()) / "pyproject.toml"
        table = _popviz_table(_read_toml(p), {}) if p.is_file() else {}
        origin = f"{shown(p)} [tool.popviz]" if table else None
        whole = False
    if not isinstance(table, dict):
        raise UsageError(f"{origin}: [tool.popviz] must be a table")
    unknown = [k for k in table if k not in CONFIG_KEYS]
    if unknown:  # a misspelt table (fial = {...}) would otherwise gate nothing, silently
        where = "the file (it has no [tool.popviz] table, so its top level is read as one)" if whole \
            else "[tool.popviz]"
        raise UsageError(f"{shown(p)}: unknown key {_shown(unknown[0])} in {where}; the keys are "
                         f"{', '.join(CONFIG_KEYS)} (docs/ci.md)")
    fail = table.get("fail", {})
    if not isinstance(fail, dict):
        raise UsageError(f"{origin}: fail must be a table of METRIC = \"THRESHOLD\"")
    ignore = table.get("ignore", [])
    if isinstance(ignore, str):
        ignore = [c.strip() for c in ignore.split(",") if c.strip()]
    if not isinstance(ignore, list) or not all(isinstance(c, str) for c in ignore):
        raise UsageError(f"{origin}: ignore must be a list of finding codes")
    check_finding_codes(ignore, f"{origin}: ignore")
    budgets = table.get("budgets", {})
    if not isinstance(budgets, dict):
        raise UsageError(f"{origin}: budgets must be a table of METRIC = \"<= LIMIT\"")
    for k in fail:
        if isinstance(fail[k], dict):  # pipeline.imbalance_ratio = "5%" unquoted: TOML made a table of it
            raise UsageError(f"{origin}: fail {_shown(k)} is a table, not a threshold: quote a metric name that "
                             "has dots, e.g. \"pipeline.imbalance_ratio\" = \"5%\"")
        if not _BUDGET_PATTERN.fullmatch(k):
            raise UsageError(f"{origin}: fail {_shown(k)} is not a metric name or glob (e.g. memory.*); "
                             "docs/ci.md lists the names")
    return Config(fail=[Rule(k, parse_threshold(v, f" for {k} in {origin}"), origin or "") for k, v in fail.items()],
                  ignore=[c.upper() for c in ignore],
                  budgets=[parse_budget(k, v, origin or "") for k, v in budgets.items()], origin=origin)


def load_budgets(path: str) -> list[Budget]:
    """A budgets file: ``METRIC = "<= LIMIT"`` lines (top level or under ``[budgets]``)."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{shown(p)} does not exist; pass --budget with a TOML file of METRIC = \"<= LIMIT\"")
    doc = _read_toml(p)
    table = doc.get("budgets", doc)
    if "budgets" in doc and len(doc) > 1:  # [bugdets] beside [budgets] would gate nothing, silently
        other = next(k for k in doc if k != "budgets")
        raise UsageError(f"{shown(p)}: {_shown(other)} beside [budgets]; a budgets file holds only [budgets] (or "
                         "budgets at the top level): move it into [budgets] or remove it")
    if not isinstance(table, dict) or not table:
        raise UsageError(f"{shown(p)} holds no budgets; write lines such as \"memory.*.used_pct\" = \"<= 85\"")
    return [parse_budget(k, v, shown(p)) for k, v in table.items()]


def ignored_codes(args: Any, config_ignore: list[str]) -> list[str]:
    """Finding codes to ignore: ``--ignore A,B`` (``args.ignore``) and ``[tool.popviz] ignore``.
    (Here rather than in ``popviz.ci.cli`` so ``popviz analyse`` need not import the comparison
    machinery.)"""
    codes = [c.strip().upper() for c in (getattr(args, "ignore", None) or "").split(",") if c.strip()]
    check_finding_codes(codes, "--ignore")
    return sorted(set(codes) | set(config_ignore))


def check_finding_codes(codes: Iterable[str], where: str) -> None:
    """Refuse a code no analysis reports (a typo such as PIPE01 would otherwise ignore nothing)."""
    from popviz.analysis.findings import CODES

    for code in codes:
        if code.strip().upper() not in CODES:
            raise UsageError(f"{where}: {_shown(code)} is not a finding code popviz reports; "
                             f"use one of {', '.join(sorted(CODES))} (docs/findings.md)")
