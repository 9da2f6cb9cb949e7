"""``popviz plan``'s output: plain text (console), Markdown and JSON of one LayerPlan."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from popviz import escape
from popviz.analysis._common import num
from popviz.analysis.layer_costs import units_text
from popviz.analysis.layer_plan import LayerPlan, SplitView, code_dict
from popviz.analysis.planner import REPLICAS_SEARCHED
from popviz.model.numbers import reserved_ipus
from popviz.units import fmt_bytes

JSON_FORMAT = "popviz-plan-result"
JSON_VERSION = 1

LEVER_TEXT = {
    "offload_optimizer": ("offload the optimizer state",
                          "opts.TensorLocations.setOptimizerLocation("
                          "poptorch.TensorLocationSettings().useOnChipStorage(False)); "
                          "optimum: optimizer_state_offchip=True"),
    "recompute": ("recompute activations",
                  "poptorch.recomputationCheckpoint(...) on each layer's output; "
                  "optimum: recompute_checkpoint_every_layer=True"),
    "halve_micro_batch": ("halve the micro-batch",
                          "half the DataLoader batch size, double G to keep the global batch"),
    "float16": ("model.half() with float16 inputs (the model runs in float32)",
                "model.half() and float16 inputs (the optimizer state and gradient accumulators keep "
                "PopTorch's float32 accum types)"),
    "more_ipus": ("more IPUs", ""),
    "replicas": ("replicas sharing the optimizer state",
                 "opts.replicationFactor(R); opts.TensorLocations.setOptimizerLocation("
                 "poptorch.TensorLocationSettings().useReplicatedTensorSharding(True))"),
}


def _mem(n: int, cap: int) -> str:
    return f"{fmt_bytes(n)} {100 * n / cap:.0f}%"


def _label(plan: LayerPlan) -> str:
    if plan.layer_source == "calibrated":
        return "calibrated: measured per-stage figures spread by the emulator's per-layer proportions"
    if plan.estimated:
        return "estimated: per-layer costs from the emulator's cost model"
    return "measured per-layer costs"


def _side(view: SplitView | None, i: int) -> list[str]:
    if view is None or i >= len(view.stages):
        return ["", "", ""]
    st = view.stages[i]
    extra = st.entries - st.layers
    return [f"{st.layers}{f'+{extra}' if extra else ''}", num(st.cycles),
            _mem(st.memory_bytes, st.capacity_bytes)]


def _grid(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if c in right else cell.ljust(w)
                      for c, (cell, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]


def split_table(plan: LayerPlan) -> list[str]:
    cur, new = plan.current, plan.proposed
    n = max(len(cur.stages) if cur else 0, len(new.stages) if new else 0)
    if cur is not None and new is not None:
        # the report's stages may skip an IPU (blocks on 0, 2, 3): the rows are then its stages
        ids = plan.current_ipus
        renumbered = len(ids) == len(cur.stages) and ids != list(range(len(ids)))
        rows = [["", "now:", "", "", "plan:", "", ""],
                ["stage" if renumbered else "IPU", "layers", "cycles/µb", "memory", "layers", "cycles/µb",
                 "memory"]]
        for i in range(n):
            slowest = i < len(cur.stages) and cur.stages[i].cycles == cur.bottleneck_cycles
            rows.append([f"{'◀ ' if slowest else ''}{i}", *_side(cur, i), *_side(new, i)])
        lines = _grid(rows, {0, 1, 2, 3, 4, 5, 6})
        if renumbered:
            lines.append("stages: now on " + ", ".join(f"IPU{k}" for k in ids) + "; a plan puts stage k on IPU k")
        return lines
    view = new or cur
    assert view is not None
    rows = [["IPU", "layers", "cycles/µb", "memory", "from", "to"]]
    for i, st in enumerate(view.stages):
        rows.append([str(i), *_side(view, i), st.first_layer, st.last_layer])
    return _grid(rows, {0, 1, 2, 3})


Section = tuple[str, list[str]]
"""(``text``, ``table`` or ``code``, lines)."""


def _printable(line: str) -> str:
    """Names from report files are data: no control characters (terminal escapes) reach the screen."""
    return escape.term(line)


def _md_line(line: str) -> str:
    """A text line as Markdown: its list marker or indent kept, the rest escaped (escape.md)."""
    lead = "- " if line.startswith("- ") else line[:len(line) - len(line.lstrip(" "))]
    return lead + escape.md(line[len(lead):], starts_line=lead != "- ")


def _sections(plan: LayerPlan, rerun: str | None, plan_path: str | None,
              rerun_from: str | None = None) -> list[Section]:
    return [(kind, [_printable(line) for line in lines])
            for kind, lines in sections(plan, rerun, plan_path, rerun_from)]


def text_lines(plan: LayerPlan, rerun: str | None = None, plan_path: str | None = None,
               width: int | None = None, *, rerun_from: str | None = None) -> list[str]:
    """The console view, line by line; prose wrapped at ``width``, code broken after the commas
    of its brackets and the check command as continuation lines (`` \\``) where longer; tables
    never."""
    from popviz.render.text import wrap_words
    from popviz.ui import wrap_code, wrap_command

    out = []
    for kind, lines in _sections(plan, rerun, plan_path, rerun_from):
        for line in lines:
            if kind == "code":
                out += wrap_code(line, width, "  ") if width else [f"  {line}"]
            elif kind == "shell":
                out += wrap_command(line, width, "  ") if width else [f"  {line}"]
            elif kind == "text" and width and len(line) > width:
                first = line[:len(line) - len(line.lstrip())]
                lead = "  " if line.startswith(("- ", "note: ")) else first or " "
                out += wrap_words(line.lstrip(), width, first, lead)  # a number stays with its unit
            else:
                out.append(line)
    return [escape.defuse_commands(line) for line in out]  # a wrapped name may start a line


def sections(plan: LayerPlan, rerun: str | None = None, plan_path: str | None = None,
             rerun_from: str | None = None) -> list[Section]:
    """The plan as (kind, lines). ``rerun_from`` names the run record the re-run command was read
    from: the command is then marked as the recorded one (read it before running it)."""
    s = plan.settings
    out: list[Section] = []
    lines = [f"plan for {plan.engine} ({_label(plan)})",
             f"memory per IPU {fmt_bytes(s.capacity_bytes)}, budget {s.headroom_frac:.0%} = "
             f"{fmt_bytes(s.budget_bytes)}; {'training' if s.training else 'inference'}"
             + ("; optimizer state off chip" if s.training and s.offload_optimizer else "")
             + (f"; G = {plan.micro_batches}" if s.training and plan.micro_batches else "")
             + (f"; D = {plan.micro_batches}" if not s.training and plan.micro_batches else "")]
    lines += [f"note: {n}" for n in plan.notes]
    lines.append("")
    out.append(("text", lines))
    if plan.proposed is None:
        return out + no_fit_sections(plan)
    out.append(("table", split_table(plan)))
    lines = []
    out.append(("text", lines))
    lines.append("layers: repeated layers, +k other parts (embeddings, heads, loss)")
    lines.append("µb: micro-batch" + ("; ◀ the slowest stage now" if plan.current else ""))
    if len(plan.by_ipus) > 1:
        lines += ["", "by number of IPUs:"]
        rows = [["IPUs", "slowest stage", "ramp", "µb/s", "per IPU", "vs now"]]
        for k, v in plan.by_ipus.items():
            if v is None:
                rows.append([str(k), "does not fit", "", "", "", ""])
                continue
            vs = (f"{100 * (v.micro_batches_per_second / plan.current.micro_batches_per_second - 1):+.1f}%"
                  if plan.current else "")
            rows.append([str(k) + (" ◀" if v is plan.proposed else ""), num(v.bottleneck_cycles),
                         f"{_ramp(v)} at {'G' if plan.settings.training else 'D'}={v.micro_batches}"
                         if not v.fills_pipeline
                         else f"{100 * v.ramp_efficiency_frac:.1f}%" if v.ramp_efficiency_frac else "–",
                         f"{v.micro_batches_per_second:,.1f}",
                         f"{v.micro_batches_per_second / reserved_ipus(k):,.2f}", vs])
        out.append(("table", _grid(rows, {1, 2, 3, 4, 5})))
        odd = [k for k in plan.by_ipus if reserved_ipus(k) != k]
        lines = [f"per IPU: over the IPUs PopTorch reserves ({', '.join(f'{k} reserve {reserved_ipus(k)}' for k in odd)}: "
                 "IPU counts round up to a power of two)"] if odd else []
        deep = [k for k, v in plan.by_ipus.items() if v is not None and not v.fills_pipeline]
        if deep and plan.micro_batches is not None:
            letter = "G" if plan.settings.training else "D"
            depths = ", ".join(f"S={plan.by_ipus[k].pipeline_stages} on {k} IPUs" for k in deep)
            lines.append(f"at {letter}=…: {letter} = {plan.micro_batches} is below their pipeline stages ({depths}), "
                         f"which PopTorch refuses, so their figures are for {letter}=S, not like for like with "
                         "now's" + ("" if not plan.proposed.fills_pipeline else
                                    f"; the proposal is the fastest at {letter} = {plan.micro_batches}"))
        lines.append("")
        out.append(("text", lines))
    else:
        lines.append("")
    new, cur = plan.proposed, plan.current
    ramp = (f"ramp efficiency {_ramp(cur)} → {_ramp(new)}" if cur else f"ramp efficiency {_ramp(new)}")
    if cur is not None:
        lines.append(f"slowest stage {num(cur.bottleneck_cycles)} → {num(new.bottleneck_cycles)} cycles "
                     "per micro-batch")
        lines.append(ramp)
        change = plan.throughput_change_frac or 0.0
        n_new, n_cur = len({st.ipu for st in new.stages}), len({st.ipu for st in cur.stages})
        # what PopTorch reserves per replica: IPUs 0 to the highest used, to a power of two
        r_new, r_cur = (reserved_ipus(max(st.ipu for st in v.stages) + 1) for v in (new, cur))
        other_ipus = n_new != n_cur or r_new != r_cur
        if other_ipus or plan.improves:  # another IPU count (asked for): say what it takes or frees
            d = abs(r_cur - r_new)
            now = f"now {n_cur}" if n_cur == r_cur else f"now {n_cur} of the {r_cur} PopTorch reserves"
            held = (f"{'frees' if r_new < r_cur else 'takes'} {d}{'' if r_new < r_cur else ' more'} "
                    f"IPU{'s' if d != 1 else ''} per replica" if d else
                    f"reserves the same {r_new} IPUs per replica")
            ipus = f": the best split on {n_new} IPUs ({now}); it {held}" if other_ipus else ""
            lines.append(f"predicted throughput {change:+.1%} "
                         f"({cur.micro_batches_per_second:,.1f} → {new.micro_batches_per_second:,.1f} "
                         f"micro-batches/s){ipus}")
        elif cur.fits or new.entries_per_ipu == cur.entries_per_ipu:
            lines.append("the current split is already the best that fits: nothing to change")
        else:  # slower or as fast, but it fits where the current split does not
            lines.append(f"predicted throughput {change:+.1%} "
                         f"({cur.micro_batches_per_second:,.1f} → {new.micro_batches_per_second:,.1f} "
                         "micro-batches/s): the cost of fitting")
        if not cur.fits:
            over = [st.ipu for st in cur.stages if st.memory_bytes > s.budget_bytes]
            if over:
                lines.append("the current split does not fit its budget on "
                             + ", ".join(f"IPU{i}" for i in over) + "; the plan does")
    else:
        lines.append(f"slowest stage {num(new.bottleneck_cycles)} cycles per micro-batch; "
                     f"{new.micro_batches_per_second:,.1f} micro-batches/s")
        lines.append(ramp)
    if cur is not None and not plan.improves and (cur.fits or new.entries_per_ipu == cur.entries_per_ipu) \
            and len({st.ipu for st in new.stages}) == len({st.ipu for st in cur.stages}):
        return out
    code = code_dict(plan)
    out.append(("text", ["", "as code (PopTorch: put BeginBlock on these modules, remove the others):"]))
    block = [*code["begin_block"]]
    if code["available_memory_proportion"]:
        block.append(code["available_memory_proportion"])
    if code["auto_round_num_ipus"]:
        block.append(code["auto_round_num_ipus"])
    if code["pipeline_depth"]:
        block.append(code["pipeline_depth"])
    out += [("code", block),
            ("text", ["(layers placed with poptorch.Block(..., ipu_id=k) or Stage(...).ipu(k) instead: give the same "
                      "layers those IPUs there)", "optimum-graphcore:"]),
            ("code", [code["ipu_config"]])]
    if rerun:
        where = (f" (the command recorded in {rerun_from}: read it before running it)" if rerun_from else "")
        first = ("before editing the model" if plan.proposed is None or plan.proposed.fills_pipeline else
                 f"once the script sets {'G' if plan.settings.training else 'D'} to "
                 f"{plan.proposed.pipeline_stages} or more (PopTorch refuses fewer)")
        out += [("text", [f"check it under the emulator {first}{where}:"]), ("shell", [rerun])]
        if code["available_memory_proportion"]:
            out.append(("text", ["(it checks the split; the memory proportions above apply once the script sets "
                                 "them, and their slower matmuls are not in this plan's cycles)"]))
    if plan_path:
        out.append(("text", [f"plan written to {plan_path}"]))
    return out


def _ramp(v: SplitView) -> str:
    return f"{100 * v.ramp_efficiency_frac:.1f}%" if v.ramp_efficiency_frac is not None else "n/a"


def no_fit_sections(plan: LayerPlan) -> list[Section]:
    sf = plan.shortfall
    assert sf is not None
    s = plan.settings
    n = len(sf.split.stages)
    worst = max(range(n), key=lambda i: sf.split.stages[i].memory_bytes)
    units = [sum(r == "layer" for r in plan.layer_roles[st.first:st.stop]) for st in sf.split.stages]
    lines = [f"no split of the model's {units_text(plan.layer_roles)} over {n} "
             f"IPU{'s' if n != 1 else ''} fits under {s.headroom_frac:.0%} of each IPU's memory "
             f"({fmt_bytes(s.budget_bytes)}).",
             f"the split needing the least memory (layers_per_ipu {units}) misses by "
             f"{fmt_bytes(sf.overflow_bytes)} ({num(sf.overflow_bytes)} bytes) on IPU{worst}:"]
    rows = [["IPU", "needs", "over by"]]
    for i, (st, over) in enumerate(zip(sf.split.stages, sf.overflow_bytes_per_ipu, strict=True)):
        rows.append([str(i), _mem(st.memory_bytes, s.capacity_bytes), fmt_bytes(over) if over else "fits"])
    out: list[Section] = [("text", lines), ("table", _grid(rows, {0, 1, 2}))]
    lines = []
    out.append(("text", lines))
    lines.append(f"what closes the gap (bytes saved on IPU{worst}; each lever alone):")
    for lv in sf.levers:
        if not lv.saved_bytes and not lv.closes_gap:
            continue  # e.g. no optimizer state to offload, nothing stashed twice
        name, how = LEVER_TEXT[lv.name]
        if lv.name == "more_ipus":
            how = (f"popviz plan --ipus {lv.value} REPORT" if lv.value else
                   "no number of IPUs is enough")
            name = f"{lv.value} IPUs" if lv.value else name
        if lv.name == "replicas" and lv.value:
            name = f"{lv.value} replicas sharing the optimizer state ({lv.value} × {n} IPUs)"
            how = how.replace("(R)", f"({lv.value})")
        elif lv.name == "replicas":
            name = f"replicas sharing the optimizer state (even {REPLICAS_SEARCHED[-1]}, the most tried)"
        verdict = "fits" if lv.closes_gap else "not enough"
        lines.append(f"- {name}: saves {fmt_bytes(lv.saved_bytes)} ({num(lv.saved_bytes)} bytes): {verdict}")
        for part in how.split("; ") if how else ():
            lines += _code_lines(part)
    return out


CODE_WIDTH = 78
"""A lever's code line longer than this (80 columns, indented) breaks after its first ``(``: still
Python to paste, and no terminal wraps it mid-name."""


def _code_lines(part: str) -> list[str]:
    """One part of a lever's how-to: code (``opts...``) broken after its first ``(`` when long,
    words wrapped."""
    if len(part) <= CODE_WIDTH:
        return [f"  {part}"]
    if part.startswith(("opts.", "poptorch.")) and "(" in part:
        cut = part.index("(") + 1
        return [f"  {part[:cut]}", f"      {part[cut:]}"]
    return textwrap.wrap(part, CODE_WIDTH + 2, initial_indent="  ", subsequent_indent="  ")


def markdown(plan: LayerPlan, rerun: str | None = None, plan_path: str | None = None, *,
             rerun_from: str | None = None, width: int | None = None) -> str:
    """The plan as Markdown; with ``width``, its code and commands broken to fit as on the console
    (still Python, still one command)."""
    out = [f"## popviz plan: {escape.md(plan.engine)}", ""]
    for kind, lines in _sections(plan, rerun, plan_path, rerun_from):
        if kind == "text":  # a hard line break keeps the lines apart
            out += [f"{_md_line(line)}  " if line and not line.startswith(("- ", "  ")) else _md_line(line)
                    for line in lines]
        elif kind in ("code", "shell") and width:
            from popviz.ui import wrap_code, wrap_command

            wrap = wrap_code if kind == "code" else wrap_command
            out += escape.md_fenced([part for line in lines for part in wrap(line, width)])
        else:
            out += escape.md_fenced(lines)
    return "\n".join(out) + "\n"


def to_json(plan: LayerPlan, rerun: str | None = None, plan_path: str | None = None, *,
            rerun_from: str | None = None) -> str:
    doc: dict[str, Any] = {"format": JSON_FORMAT, "format_version": JSON_VERSION, **plan.to_dict(),
                           "rerun_command": rerun, "rerun_command_recorded_in": rerun_from,
                           "plan_file": plan_path}
    return json.dumps(doc, indent=2, allow_nan=False)
