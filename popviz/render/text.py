"""Plain-text pieces shared by the console and Markdown renderers."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from popviz.model import Report
from popviz.model.frames import never_called, not_reached
from popviz.model.parts import tensors_text
from popviz.units import fmt_bytes

if TYPE_CHECKING:
    from popviz.analysis.findings import EngineResult, Result


def run_groups(result: Result) -> list[tuple[str | None, list[EngineResult]]]:
    """The engines grouped by run, in order: a directory holding several separate runs is shown
    run by run; the instances of one PopRun run form one group."""
    from popviz.analysis.instances import run_of

    groups: dict[str | None, list[EngineResult]] = {}
    for e in result.engines:
        groups.setdefault(run_of(e.report), []).append(e)
    return list(groups.items())


def run_heading(run: str | None, engines: list[EngineResult]) -> str:
    from popviz.analysis.instances import is_instance

    n = len({e.report.instance for e in engines if is_instance(e.report)})
    where = f"run {run}" if run else "run (top level)"
    return where + (f" · {n} PopRun instances" if n > 1 else "")


def fmt_cell(value: object) -> str:
    """A table cell: ``–`` for missing values (None, NaN, pd.NA), thousands separators for
    numbers (two decimals below 1,000)."""
    if value is None or type(value).__name__ == "NAType":  # pandas.NA, without importing pandas
        return "–"
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalars
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "–"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        cell = f"{value:,.2f}".rstrip("0")  # 31.70 -> 31.7, 0.00 -> 0.0
        return cell + "0" if cell.endswith(".") else cell
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


ANALYSIS_TITLES = {"host_io": "host I/O"}


def analysis_title(name: str) -> str:
    """How an analysis is headed in the console and Markdown views."""
    return ANALYSIS_TITLES.get(name, name.replace("_", " "))


CODE_PREFIXES = ("opts.", "poptorch.")


def marked_up_spans(prose: str) -> list[tuple[str, bool]]:
    """:func:`code_spans`, plus a quoted popviz command (`popviz plan`) as code without its
    backticks: for Markdown and HTML, where backticks would show escaped. Only popviz's own
    commands: backticks in a name from a file stay text."""
    pieces: list[tuple[str, bool]] = []
    for k, part in enumerate(re.split(r"`(popviz [^`\n]+)`", prose)):
        if k % 2:
            pieces.append((part, True))
        elif part:
            pieces.extend(code_spans(part))
    return pieces


def code_spans(prose: str) -> list[tuple[str, bool]]:
    """Split a recommendation into (text, is_code) pieces: a code piece starts with ``opts.`` or
    ``poptorch.`` and runs through identifier characters and balanced parentheses, so
    ``opts.outputMode(poptorch.OutputMode.Final)`` is one piece (Python, pasted whole)."""
    pieces: list[tuple[str, bool]] = []
    i = start = 0
    n = len(prose)
    while i < n:
        at_word = i == 0 or not (prose[i - 1].isalnum() or prose[i - 1] in "._")
        prefix = next((p for p in CODE_PREFIXES if at_word and prose.startswith(p, i)), None)
        if prefix is None:
            i += 1
            continue
        j, depth = i + len(prefix), 0
        while j < n:
            c = prose[j]
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and not (c.isalnum() or c in "._"):
                break
            j += 1
        if depth:  # unbalanced: not code after all
            i += 1
            continue
        while j > i and prose[j - 1] == ".":  # a sentence's full stop is not code
            j -= 1
        if start < i:
            pieces.append((prose[start:i], False))
        pieces.append((prose[i:j], True))
        i = start = j
    if start < n:
        pieces.append((prose[start:], False))
    return pieces


def fmt_count(n: float | None) -> str:
    """``12345678`` -> ``12.3M``."""
    if n is None:
        return "n/a"
    value = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:,.0f}"


def fmt_hz(hz: float) -> str:
    return f"{hz / 1e9:.2f} GHz" if hz >= 1e9 else f"{hz / 1e6:.0f} MHz"


def provenance_line(report: Report) -> str:
    p = report.provenance
    kind = "ESTIMATED" if p.estimated else ("measured" if p.source == "pva" else "as recorded")
    tool = p.tool or ""
    if tool.endswith(" " + p.source):  # "emulator by popviz 0.1.0 emulator" would say it twice
        source = f"{p.source} of {tool.removesuffix(' ' + p.source)}"
    else:
        source = f"{p.source} by {tool}" if tool else p.source
    when = f", {p.captured_at}" if p.captured_at else ""
    return f"{kind} ({source}{when})"


def target_line(report: Report) -> str:
    t = report.target
    if t is None:
        return "unknown (no target in this report)"
    per = t.ipus_per_replica
    replicas = f" · {t.num_replicas} replicas × {per} IPU{'s' if per != 1 else ''}" if t.num_replicas > 1 else ""
    return (f"{t.architecture} · {t.num_ipus} IPU{'s' if t.num_ipus != 1 else ''} × "
            f"{t.tiles_per_ipu:,} tiles · {fmt_bytes(t.bytes_per_tile)}/tile "
            f"({fmt_bytes(t.bytes_per_ipu)}/IPU) · {fmt_hz(t.clock_hz)}{replicas}")


def strategy_line(report: Report) -> str:
    c = report.config
    if c is None or c.is_empty():
        return "unknown (no configuration recorded; capture with popviz capture to record it)"
    if c.inferred and not c.stages:
        return ("unknown (no configuration recorded, and no execution in the profile to infer it "
                "from; capture with popviz capture to record it)")
    mode = f"{c.mode}, " if c.mode else ""
    if never_called(report):
        return f"{mode}never called: no stages traced (RUN001)"
    if not_reached(report):
        return f"{mode}not reached: no stages traced ({not_reached(report)})"
    strategy = c.execution_strategy or ("single IPU" if len(c.stage_ipus) <= 1 else "no strategy")
    line = f"{mode}{strategy}, {c.num_stages} stage{'s' if c.num_stages != 1 else ''}"
    guessed = [k for k in ("mode", "execution_strategy", "stages") if c.is_inferred(k)]
    return line + (" (inferred from the profile)" if guessed else "")


def inferred_lines(report: Report) -> list[str]:
    """One line per assumption behind a configuration inferred from the profile alone (empty
    when the configuration was recorded)."""
    c = report.config
    return list(c.inferred.values()) if c is not None else []


def stage_lines(report: Report) -> list[str]:
    c = report.config
    if c is None:
        return []
    return [f"stage {s.index} → IPU{s.ipu}: {', '.join(s.blocks) or '(no blocks named)'}"
            for s in c.stages]


def batching_line(report: Report) -> str:
    c = report.config
    if c is None or c.is_empty():
        return "unknown"

    def v(x: object, name: str = "") -> str:
        return "?" if x is None else str(x) + (" (inferred)" if c.is_inferred(name) else "")

    mode = c.output_mode or "?"
    if c.output_mode == "Default" and c.effective_output_mode:
        mode = f"Default (= {c.effective_output_mode})"
    if c.output_mode == "EveryN":
        mode += f"({v(c.output_return_period)})"
    parts = [f"device iterations {v(c.device_iterations, 'device_iterations')}",
             f"gradient accumulation {v(c.gradient_accumulation, 'gradient_accumulation')}",
             f"replication {v(c.replication_factor, 'replication_factor')}", f"output mode {mode}"]
    if c.optimizer_state_on_chip is not None and c.mode != "inference":  # inference has no optimizer
        parts.append("optimizer state " + ("on chip" if c.optimizer_state_on_chip else "off chip"))
    return " · ".join(parts)


MAX_TENSORS_LISTED = 4
"""Host tensors named per direction in the summary; the rest are counted."""


def host_tensors_text(inputs, outputs) -> str:  # (Sequence[HostTensor], Sequence[HostTensor])
    """``in: x 16×1×28×28 float32 (49.0 KiB) · out: ... per micro-batch`` ('' when none)."""
    parts = []
    for label, tensors in (("in", inputs), ("out", outputs)):
        if not tensors:
            continue
        parts.append(f"{label}: {tensors_text(tensors, MAX_TENSORS_LISTED)} "
                     f"({fmt_bytes(sum(t.bytes for t in tensors))})")
    return " · ".join(parts) + " per micro-batch" if parts else ""


def data_line(report: Report) -> list[tuple[str, str]]:
    """(part, description) for every part: what is there, or that it is missing."""
    out = []
    m = report.memory
    out.append(("memory", f"per {m.level.upper() if m.level == 'ipu' else m.level}, {len(m.frame):,} "
                f"row{'s' if len(m.frame) != 1 else ''}" + (
        f", {len(m.categories)} categories" if m.categories else "") if m is not None else "missing"))
    e = report.execution
    out.append(("execution", f"{e.num_rows:,} program steps (compute, exchange, syncs, copies) over "
                f"{len(e.runs)} profiled run(s)" if e is not None else "missing"))
    h = report.host_io
    if h is not None and report.has("host_io"):
        desc = host_tensors_text(h.inputs, h.outputs) or \
            f"{len(h.inputs)} input(s), {len(h.outputs)} output(s)"
        if h.calls is not None:
            desc += f" · {h.calls:,} call{'s' if h.calls != 1 else ''}"
        out.append(("host I/O", desc))
    else:
        out.append(("host I/O", "missing"))
    config = "recorded" if report.has("config") else "missing"
    if report.has("config") and report.cfg.inferred:
        config = "inferred from the profile (no popviz-model.json: run under popviz capture to record it)"
    out.append(("config", config))
    return out


def _code_breaks(code: str, chars: str = "(,.") -> list[str]:
    """``code`` cut into pieces that may each end a line: after ``(``, ``,`` or ``.`` inside
    parentheses only (Python continues a line inside brackets), never inside an identifier."""
    pieces, depth, start = [], 0, 0
    for i, c in enumerate(code):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if depth > 0 and c in chars and i + 1 < len(code):
            pieces.append(code[start:i + 1])
            start = i + 1
    pieces.append(code[start:])
    return pieces


UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "kB", "KB", "MB", "GB", "TB", "ns", "us", "µs", "ms", "s",
         "GHz", "MHz", "GB/s", "MB/s", "TB/s", "cycles", "cycle")
"""Units a number is never separated from at a line break ("976.1" on one line, "µs" on the next
read as two figures)."""
_UNIT_NAMES = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
_UNIT = re.compile(rf"(?:{_UNIT_NAMES})(?![A-Za-z0-9])")


def words(line: str) -> list[str]:
    """``line`` split at its spaces, except between a number and its unit ("976.1 µs",
    "357,417,792 B (340.9 MiB)" breaks only before "(")."""
    out: list[str] = []
    for token in line.split(" "):
        if out and out[-1][-1:].isdigit() and _UNIT.match(token):
            out[-1] += " " + token
        else:
            out.append(token)
    return out


def wrap_words(body: str, width: int, first: str = "", lead: str = "") -> list[str]:
    """``body`` (one line) wrapped at ``width`` with :func:`words` (a number stays with its unit):
    the first line starts with ``first``, the others with ``lead``."""
    out = []
    cur = first
    for w in words(body):
        if not w:
            continue
        if cur.strip() and len(cur) + 1 + len(w) > width:
            out.append(cur)
            cur = lead + w
        else:
            cur = (cur + " " + w) if cur.strip() else cur + w
    out.append(cur)
    return out


def prewrap(value: str, width: int) -> str:
    """``value`` wrapped at ``width`` with :func:`wrap_words`, each line's leading spaces kept as
    the indent of its continuation lines; existing line breaks kept. For text a renderer would
    otherwise wrap at any space (rich)."""
    width = max(width, 20)
    out = []
    for line in value.split("\n"):
        body = line.lstrip(" ")
        indent = line[:len(line) - len(body)]
        out += wrap_words(body, width, indent, indent)
    return "\n".join(out)


def wrap_code_prose(prose: str, width: int) -> list[list[tuple[str, bool]]]:
    """Lines of (text, is_code) pieces no wider than ``width`` where possible: prose wraps at
    spaces; code (``code_spans``) starts a new line when it does not fit, and breaks only where
    ``_code_breaks`` allows (continuation lines indented by 4), so a copied line is never cut in
    the middle of an identifier and the lines pasted together are valid Python."""
    width = max(width, 20)
    lines: list[list[tuple[str, bool]]] = [[]]
    used = 0

    def put(piece: str, code: bool) -> None:
        nonlocal used
        lines[-1].append((piece, code))
        used += len(piece)

    def newline(indent: str = "") -> None:
        nonlocal used
        while lines[-1] and not lines[-1][-1][1] and lines[-1][-1][0].endswith(" "):
            last = lines[-1][-1][0].rstrip(" ")
            lines[-1][-1] = (last, False)
            if last:
                break
            lines[-1].pop()
        lines.append([])
        used = 0
        if indent:
            put(indent, False)

    for piece, code in code_spans(prose):
        if code:
            parts = _code_breaks(piece, "(,")
            if max(map(len, parts)) > width - 4:
                parts = _code_breaks(piece)
            if used and used + len(piece) > width:
                # an opening bracket or quote right before the code goes with it ("(" alone at
                # the end of a line, the code on the next, was hard to read and to copy)
                carry = ""
                if lines[-1] and not lines[-1][-1][1]:
                    last = lines[-1][-1][0]
                    kept = last.rstrip("([{'\"")
                    if kept != last and (not kept or kept.endswith(" ")):
                        carry = last[len(kept):]
                        lines[-1][-1] = (kept, False)
                        used -= len(carry)
                newline()
                if carry:
                    put(carry, False)
            for k, part in enumerate(parts):
                if used + len(part) > width and used > 4:
                    newline("    " if k else "")
                put(part, True)
            continue
        for k, token in enumerate(words(piece)):
            if not token:
                continue
            # words are separated by a space; the first attaches to what came before (".", ";")
            gap = " " if (k > 0 and used) else ""
            if used and used + len(gap) + len(token) > width:
                newline()
                gap = ""
            put(gap + token, False)
        if piece.endswith(" ") and used:
            lines[-1].append((" ", False))
            used += 1
    return [line for line in lines if line]


SUMMARY_ACTIONS = 3
"""Top actions per engine in the summary at the head of the console and Markdown views."""


def worst_finding(result: Result):  # -> tuple[str, Finding] | None
    """The engine label and finding the summary leads with: of the most severe findings, the one
    whose plan action gains the most (throughput, then bytes), the analyses' order on ties."""
    worst = result.worst_severity()
    if not worst:
        return None
    ranked = []
    for e in result.engines:
        actions = {(a.code, a.title): a for a in (e.plan.actions if e.plan is not None else ())}
        for f in e.findings:
            if f.severity == worst:
                a = actions.get((f.code, f.title))
                gain = (a.throughput_gain_frac or 0, a.bytes_saved_per_call or 0) if a is not None else (0, 0)
                ranked.append((gain, e.report.label, f))
    best = max(ranked, key=lambda item: item[0])[0]  # max keeps the first of equal gains
    return next((label, f) for gain, label, f in ranked if gain == best)


IGNORED_MARK = "ignored: accepted by the team"
"""After the title of a finding whose code the team has accepted (--ignore, [tool.popviz] ignore)."""


def summary_lines(result: Result) -> list[str]:
    """The short summary: engines, the worst finding, and each engine's top actions with their
    estimated gain (from its plan)."""
    n = len(result.engines)
    worst = result.worst_severity()
    first = worst_finding(result)
    lines = [f"{n} engine{'s' if n != 1 else ''}"
             + (f"; worst finding: {worst}, {first[1].code} on {first[0]}: {first[1].title}" if first
                else "; no findings")]
    for e in result.engines:
        plan = e.plan
        if plan is None or not plan.actions:
            continue
        top = plan.actions[:SUMMARY_ACTIONS]
        shown_codes = {a.code for a in top}
        rest = [f for f in e.findings if f.code not in shown_codes]
        more = ""
        if rest:  # never drop a finding silently: say how many, and how severe, the engine's section adds
            counts = {s: sum(f.severity == s for f in rest) for s in ("error", "warning", "info")}
            more = "; and " + ", ".join(f"{n} more {s}{'s' if n != 1 and s != 'info' else ''}"
                                        for s, n in counts.items() if n) + " below"
        lines.append(f"{e.report.label}: " + "; ".join(
            f"{k}. {a.code} {a.title} ({a.gain_text}"
            + ("; ignored: accepted by the team" if a.code in result.ignored else "") + ")"
            for k, a in enumerate(top, 1)) + more)
        for d in plan.decisions:
            if len(d.reasons) > 1:  # several findings proposed a value: say which one they share
                lines.append(f"{e.report.label}: one value for {d.option}: {d.value} "
                             f"(now {d.current if d.current is not None else 'unknown'}; "
                             + "; ".join(d.reasons) + ")")
    return lines
