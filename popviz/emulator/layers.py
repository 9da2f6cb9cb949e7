"""Per-layer costs of an emulated engine (``Report.layers``) and ``--split``'s re-placement.

**Layers.** The model is cut into *layer-level modules* at one depth of its module tree
(0 = the model, 1 = its children, ...). Chosen automatically, the depth is the shallowest one at
which a module has at least two children with parameters of the same structure (type and
parameter shapes): a BERT encoder's ``encoder.layer.0`` … ``encoder.layer.23``, a ResNet's
blocks. Those children, and their siblings with parameters, are the movable layers (role
``layer``). When ``BeginBlock`` starts blocks strictly inside those repeated modules (they run in
several stages, so no split can move them whole: DINO's student and teacher, two ViTs whose
blocks start the stages), the depth whose repeated modules start the most blocks at their roots
is taken instead (then the one with more layers). The rest of the model is covered by its largest modules with parameters that
contain no movable layer: the embeddings (before the first layer, holding an ``nn.Embedding``),
heads and loss modules (after the last), anything else (``other``). With no repeated modules,
the model's children with parameters are the layers (those of the model it wraps, for a wrapper
like Lightning's, whose only child with parameters has a private name); layers are named as
the user's model has them (:func:`popviz.block_names.user_path`). ``--layer-depth N``
(``POPVIZ_EMULATOR_LAYER_DEPTH``) sets the depth instead. Operations outside every layer-level
module (code in a parent's ``forward``, modules without parameters) belong to the nearest layer
before them in the same stage (else the next one), so every operation, parameter and stashed
activation is counted in exactly one layer and the per-layer figures add up to each stage's
compute cycles and each IPU's layer bytes exactly (inter-IPU copies, syncs and code belong to no
layer). A layer that runs in several stages (a
block boundary inside it) is placed on the stage where most of its cycles are; its operations
in other stages count with their neighbours there (a note says so).

Parameters shared between two layer-level modules (a tied output projection reusing the word
embeddings: the same ``Parameter`` registered in both) are counted once, in the first; the
later module records ``tied_to`` the first, which is pinned ``first`` when it is the
embeddings. The loss and the final head are pinned ``last`` when they run on the last IPU.

``--split`` (:mod:`popviz.emulator.split`) re-places the blocks by layer-level module. The
structure's plain data (:class:`~popviz.emulator.structure.Structure`, the environment variables,
the setup error) is in :mod:`popviz.emulator.structure`, below this module and the split; the
cost model (above) passes its operation costs to :func:`layer_table`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from popviz.block_names import user_path
from popviz.emulator import hardware as hw
from popviz.emulator.structure import DEPTH_ENV, ROOT_NAME, LayerSetupError, Structure
from popviz.model import Layer, LayerTable
from popviz.model.numbers import reserved_ipus

if TYPE_CHECKING:
    import torch

    from popviz.emulator.cost_inputs import EngineSetup, Measurement
    from popviz.emulator.costmodel import OpTable, StageEstimate

# ------------------------------------------------------------------------------ the structure


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _depth(path: str) -> int:
    return 0 if not path else path.count(".") + 1


def _has_params(module: torch.nn.Module) -> bool:
    return next(module.parameters(), None) is not None


def _signature(module: torch.nn.Module) -> tuple:
    return (type(module).__qualname__,
            tuple((n, tuple(p.shape), str(p.dtype)) for n, p in module.named_parameters()))


def _repeating(module: torch.nn.Module) -> bool:
    """Whether two of ``module``'s children with parameters have the same structure."""
    seen = set()
    for _, child in module.named_children():
        if _has_params(child):
            sig = _signature(child)
            if sig in seen:
                return True
            seen.add(sig)
    return False


def depth_from_env() -> int | None:
    raw = os.environ.get(DEPTH_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 1:
        raise LayerSetupError(f"{DEPTH_ENV}={raw!r} (--layer-depth): expected a module depth of at least 1 "
                              "(1 = the model's children)")
    return value


def discover(model: torch.nn.Module, depth: int | None = None) -> Structure:
    """The layer-level modules of ``model`` (``depth`` None: chosen automatically)."""
    modules = dict(model.named_modules())
    max_depth = max(_depth(p) for p in modules)
    if depth is not None:
        if depth > max_depth:
            raise LayerSetupError(f"--layer-depth {depth} ({DEPTH_ENV}): the model's modules go only "
                                  f"{max_depth} level(s) deep; use 1 to {max_depth}")
        d = depth
        movable = _movable_at(modules, d)
        if not movable:
            movable = [p for p, m in modules.items() if _depth(p) == d and _has_params(m)]
        if not movable:
            raise LayerSetupError(f"--layer-depth {depth} ({DEPTH_ENV}): no module with parameters at depth "
                                  f"{depth}; try a smaller depth")
        how = f"depth {d} set by --layer-depth ({DEPTH_ENV})"
    else:
        d, movable = 1, []
        for candidate in range(1, max_depth + 1):
            movable = _movable_at(modules, candidate)
            if movable:
                d = candidate
                break
        split = _split_by_blocks(modules, movable) if movable else []
        deeper = _deeper_layers(modules, d, max_depth, movable) if split else (d, movable)
        if deeper[0] != d:
            d, movable = deeper
            how = (f"depth {d} chosen automatically: BeginBlock starts blocks inside the shallowest repeated "
                   f"modules ({split[0]} ...), so the depth whose repeated modules start the most blocks "
                   f"({movable[0]} ... {movable[-1]}, {len(movable)} layers); popviz capture --emulate "
                   "--layer-depth N overrides it")
        elif movable:
            how = (f"depth {d} chosen automatically: the shallowest with repeated modules "
                   f"({movable[0]} ... {movable[-1]}, {len(movable)} layers); popviz capture --emulate --layer-depth N overrides it")
        else:
            d = _wrapped_depth(modules)
            movable = [p for p, m in modules.items() if _depth(p) == d and _has_params(m)]
            inside = f" (inside the wrapper {movable[0].rpartition('.')[0]})" if d > 1 and movable else ""
            how = (f"depth {d}: no repeated modules, so the model's children with parameters are its "
                   f"layers{inside} (popviz capture --emulate --layer-depth N overrides it)")
            if not movable:
                d, movable = 0, [""]
                how = "depth 0: no child module has parameters, so the model is its only layer"
    movable_set = frozenset(movable)
    units: list[str] = []
    if movable == [""]:
        units = [""]
    else:
        _cover(model, "", movable_set, units, set())
    every_name = dict(model.named_modules(remove_duplicate=False))  # a shared module under each name
    return Structure(depth=d, units=tuple(units), movable=movable_set,
                     roles=_roles(model, every_name, units, movable_set), tied=_tied(model, units), how=how)


def _block_starts(modules: dict[str, torch.nn.Module]) -> list[str]:
    """Paths of the modules ``poptorch.BeginBlock`` marked (a block starts when they run)."""
    from popviz.emulator.blocks import _BlockHook

    return [p for p, m in modules.items() if any(isinstance(h, _BlockHook) for h in m._forward_pre_hooks.values())]


def _split_by_blocks(modules: dict[str, torch.nn.Module], movable: Sequence[str]) -> list[str]:
    """The movable layers a BeginBlock starts strictly inside (they run in several stages: a
    split cannot move them whole, as DINO's student, a ViT whose blocks start its stages)."""
    starts = _block_starts(modules)
    return [p for p in movable if p and any(s.startswith(p + ".") for s in starts)]


def _deeper_layers(modules: dict[str, torch.nn.Module], first: int, max_depth: int,
                   movable: list[str]) -> tuple[int, list[str]]:
    """When the shallowest repeated modules are split by blocks: the depth from ``first`` on whose
    repeated modules start the most blocks at their roots (the stage boundaries a plan moves),
    then the one with more layers; ``first`` when no depth starts more."""
    starts = set(_block_starts(modules))
    best = (sum(p in starts for p in movable), len(movable))
    choice = (first, movable)
    for candidate in range(first + 1, max_depth + 1):
        layers = _movable_at(modules, candidate)
        if not layers:
            continue
        score = (sum(p in starts for p in layers), len(layers))
        if score > best:
            best, choice = score, (candidate, layers)
    return choice


def _wrapped_depth(modules: dict[str, torch.nn.Module]) -> int:
    """1, or deeper when the model wraps the user's: its only child with parameters has a private
    name (Lightning's ``_forward_module``, ``torch.compile``'s ``_orig_mod``) and children with
    parameters of its own; then that child's children are the model's children."""
    path = ""
    while True:
        kids = [p for p, m in modules.items() if _depth(p) == _depth(path) + 1
                and p.startswith(_join(path, "")) and _has_params(m)]
        if (len(kids) == 1 and kids[0].rpartition(".")[2].startswith("_")
                and any(_has_params(c) for c in modules[kids[0]].children())):
            path = kids[0]
            continue
        return _depth(path) + 1


def _movable_at(modules: dict[str, torch.nn.Module], d: int) -> list[str]:
    out = []
    for path, module in modules.items():
        if _depth(path) == d - 1 and _repeating(module):
            out.extend(_join(path, n) for n, c in module.named_children() if _has_params(c))
    return out


def _cover(module: torch.nn.Module, path: str, movable: frozenset[str], units: list[str],
           seen: set[int]) -> None:
    """The layer-level modules under ``module``, in order. A module registered under several
    names (T5's shared embedding: ``shared``, ``encoder.embed_tokens``, ``decoder.embed_tokens``)
    is one layer, under the first name it is reached by."""
    for name, child in module.named_children():
        p = _join(path, name)
        if p in movable or (not any(m.startswith(p + ".") for m in movable) and _has_params(child)):
            if id(child) not in seen:
                seen.add(id(child))
                units.append(p)
        elif any(m.startswith(p + ".") for m in movable):
            _cover(child, p, movable, units, seen)


def _unit_of(path: str, units: Sequence[str]) -> str | None:
    for u in units:
        if u == "" or path == u or path.startswith(u + "."):
            return u
    return None


def _tied(model: torch.nn.Module, units: Sequence[str]) -> dict[str, str]:
    owners: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        unit = _unit_of(name.rpartition(".")[0], units)
        if unit is None:
            continue
        first = owners.setdefault(id(p), unit)
        if first != unit and unit not in tied:
            tied[unit] = first
    return tied


def _roles(model: torch.nn.Module, modules: dict[str, torch.nn.Module], units: Sequence[str],
           movable: frozenset[str]) -> dict[str, str]:
    import torch

    order = list(units)
    idx = [i for i, u in enumerate(order) if u in movable]
    first, last = (idx[0], idx[-1]) if idx else (len(order), -1)
    roles = {}
    for i, u in enumerate(order):
        mod = modules[u] if u else model
        if u in movable:
            roles[u] = "layer"
        elif isinstance(mod, torch.nn.modules.loss._Loss):
            roles[u] = "loss"
        elif i < first:
            has_embedding = any(isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag) for m in mod.modules())
            roles[u] = "embeddings" if has_embedding else "other"
        elif i > last:
            roles[u] = "head"
        else:
            roles[u] = "other"
    return roles


def prepare(model: torch.nn.Module) -> Structure:
    """The structure for this process's settings (depth and split from the environment)."""
    from popviz.emulator.split import split_from_env, split_map

    structure = discover(model, depth_from_env())
    plan = split_from_env()
    if plan is None:
        return structure
    mapping = split_map(structure, plan)
    what = plan.source or plan.describe()
    detail = f"{plan.ipus} IPUs" if what == plan.describe() else f"{plan.describe()} over {plan.ipus} IPUs"
    note = (f"Blocks re-placed by --split {what} ({detail}); the script's own BeginBlock/Block placements "
            "were ignored.")
    rounded = reserved_ipus(plan.ipus)
    if rounded != plan.ipus:
        note += (f" PopTorch reserves IPUs in powers of two: the script needs opts.autoRoundNumIPUs(True) for "
                 f"{plan.ipus} IPUs, which this estimate assumes ({rounded} reserved, {rounded - plan.ipus} more than "
                 "the split names).")
    return dataclasses.replace(structure, split=mapping, split_note=note)


class UnitTracker:
    """While one forward pass runs: which layer-level module is running (``current``); with a
    split, each one starting moves the trace to its IPU."""

    def __init__(self, model: torch.nn.Module, structure: Structure, trace: Any) -> None:
        self.structure = structure
        self._model = model
        self._trace = trace
        self._stack: list[str] = []
        self._handles: list[Any] = []

    @property
    def current(self) -> str | None:
        return self._stack[-1] if self._stack else None

    def __enter__(self) -> UnitTracker:
        modules = dict(self._model.named_modules(remove_duplicate=False))
        hooked: set[int] = set()
        for unit in self.structure.units:
            module = modules.get(unit)
            if module is None or id(module) in hooked:
                continue
            hooked.add(id(module))
            self._handles.append(module.register_forward_pre_hook(self._make_pre(unit)))
            self._handles.append(module.register_forward_hook(self._post, always_call=True))
        return self

    def _make_pre(self, unit: str):
        def pre(module: Any, inputs: Any) -> None:
            self._stack.append(unit)
            if self._trace.split is not None:
                self._trace.place(unit)
        return pre

    def _post(self, module: Any, inputs: Any, output: Any) -> None:
        if self._stack:
            self._stack.pop()

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


# ------------------------------------------------------------------------------ the layer table


def _apportion(values: Sequence[float], total: int) -> list[int]:
    """Whole numbers proportional to ``values`` that add up to ``total`` (largest remainder)."""
    if not values:
        return []
    if total <= 0 or sum(values) <= 0:
        return [0] * (len(values) - 1) + [max(total, 0)]
    floors = [int(v // 1) for v in values]
    rest = total - sum(floors)
    order = sorted(range(len(values)), key=lambda i: (-(values[i] - floors[i]), i))
    if rest >= 0:
        for i in order[:rest]:
            floors[i] += 1
    else:  # the float sum rounded below the floors (by a cycle or two): take from the largest
        for i in sorted(range(len(values)), key=lambda i: -floors[i])[:-rest]:
            floors[i] = max(0, floors[i] - 1)
    return floors


def layer_table(m: Measurement, setup: EngineSetup, stages: Sequence[StageEstimate],
                table: OpTable) -> LayerTable | None:
    """The per-layer table of an estimate whose measurement tracked layer-level modules
    (``table``: the estimate's operation costs, :func:`popviz.emulator.costmodel.op_table`)."""
    st: Structure | None = m.structure
    if st is None or not m.ops:
        return None
    ops = m.ops
    cycles = table.forward

    # each module's home stage: where most of its cycles are
    per: dict[tuple[str, int], float] = {}
    for o, c in zip(ops, cycles, strict=True):
        if o.module is not None:
            per[(o.module, o.segment)] = per.get((o.module, o.segment), 0.0) + c
    home: dict[str, int] = {}
    for (unit, seg), c in per.items():
        if unit not in home or c > per[(unit, home[unit])]:
            home[unit] = seg
    spanning = sorted({u for (u, seg) in per if seg != home[u]})

    # every operation's layer: its module in its home stage, else the nearest one in the stage
    raw = [o.module if o.module is not None and home[o.module] == o.segment else None for o in ops]
    owner: list[str | None] = list(raw)
    last: dict[int, str] = {}
    for i, o in enumerate(ops):
        if owner[i] is None:
            owner[i] = last.get(o.segment)
        else:
            last[o.segment] = owner[i]
    nxt: dict[int, str] = {}
    for i in range(len(ops) - 1, -1, -1):
        seg = ops[i].segment
        if raw[i] is not None:
            nxt[seg] = raw[i]
        elif owner[i] is None:
            owner[i] = nxt.get(seg) or f"(stage {seg} ops)"
    names: list[str] = []
    seg_of: dict[str, int] = {}
    block_of: dict[str, str | None] = {}
    first_in_seg: dict[int, str] = {}
    for i, o in enumerate(ops):
        name = owner[i]
        if name not in seg_of:
            names.append(name)
            seg_of[name] = o.segment
            block_of[name] = o.block
        first_in_seg.setdefault(o.segment, name)
    own_block: dict[str, str | None] = {}  # the block of a layer's own first operation (not of code before it)
    for i, o in enumerate(ops):
        if raw[i] is not None and raw[i] not in own_block:
            own_block[raw[i]] = o.block
    block_of.update((n, b) for n, b in own_block.items() if n in block_of)

    def at(index: int, segment: int) -> str:
        if index < len(ops) and ops[index].segment == segment:
            return owner[index]
        for j in range(min(index, len(ops)) - 1, -1, -1):
            if ops[j].segment == segment:
                return owner[j]
        return first_in_seg.get(segment, names[0])

    fwd: dict[str, float] = dict.fromkeys(names, 0.0)
    bwd: dict[str, float] = dict.fromkeys(names, 0.0)
    temp: dict[str, int] = dict.fromkeys(names, 0)
    plan = table.recompute
    again: dict[str, int] = dict.fromkeys(names, 0)
    group: dict[str, int | None] = dict.fromkeys(names)
    rerun: dict[str, float] = dict.fromkeys(names, 0.0)  # of bwd: the recomputed forward
    code: dict[str, float] = dict.fromkeys(names, 0.0)
    flops: dict[str, float] = dict.fromkeys(names, 0.0)
    bflops: dict[str, float] = dict.fromkeys(names, 0.0)
    for i, o in enumerate(ops):  # the FLOPs the cost model charges: forward, and its backward products
        flops[owner[i]] += o.flops
        if table.backward_flops:
            bflops[owner[i]] += table.backward_flops[i]
    for i, c in enumerate(cycles):
        fwd[owner[i]] += c
        code[owner[i]] += table.code[i]
        bwd[owner[i]] += table.backward[i]
        if setup.training and plan.recomputed[i]:
            rerun[owner[i]] += c
        temp[owner[i]] = max(temp[owner[i]], int(table.temporary[i]))
        if setup.training and plan.made_bytes and plan.recomputed[i]:
            again[owner[i]] += plan.made_bytes[i]
            if group[owner[i]] is None:
                group[owner[i]] = plan.groups[i]
    fwd_int: dict[str, int] = {}
    bwd_int: dict[str, int] = {}
    for s in stages:
        mine = [n for n in names if seg_of[n] == s.index]
        fwd_int.update(zip(mine, _apportion([fwd[n] for n in mine], s.forward_cycles), strict=True))
        bwd_int.update(zip(mine, _apportion([bwd[n] for n in mine], s.backward_cycles), strict=True))
    # the recomputed forward, in the layer's forward cycles as apportioned (all of it: exactly those)
    rerun_int = {n: min(bwd_int[n], round(rerun[n] * fwd_int[n] / fwd[n])) if fwd[n] > 0 else 0 for n in names}
    checkpointed = {at(max(0, c.position - 1), c.segment) for c in m.checkpoints}

    weights = dict.fromkeys(names, 0)
    elements = dict.fromkeys(names, 0)
    tbytes = dict.fromkeys(names, 0)
    largest: dict[str, int] = {}  # layer -> its largest trainable tensor's elements
    for p in m.params:
        index = m.param_ops.get(p.name)
        name = at(index, p.segment) if index is not None else first_in_seg.get(p.segment, names[0])
        weights[name] += p.bytes
        if p.trainable:
            elements[name] += p.numel
            tbytes[name] += p.bytes
            if setup.training:
                code[name] += hw.UPDATE_CODE_BYTES_PER_TENSOR
            largest[name] = max(largest.get(name, 0), p.numel)
    slot_bytes = sum(b for _, b in setup.optimizer_slots)
    optimizer = dict.fromkeys(names, 0)
    if setup.training and setup.optimizer_on_chip:
        r = setup.replication_factor if setup.optimizer_sharded and setup.replication_factor > 1 else 1
        by_ipu: dict[int, list[str]] = {}
        for n in names:
            by_ipu.setdefault(m.segments[seg_of[n]].ipu, []).append(n)
        for mine in by_ipu.values():
            values = [elements[n] * slot_bytes / r for n in mine]
            optimizer.update(zip(mine, _apportion(values, int(round(sum(values)))), strict=True))
    elif setup.training:
        # offloaded: a tensor's state is on chip while its update runs, so each layer's largest
        # tensor's state is one of its temporaries; an IPU's peak is the largest of its layers'
        # (as in the report), and a plan moving layers keeps it on every IPU (was: only on the
        # layer holding each IPU's largest tensor, so a re-split IPU without it looked 512 MiB emptier)
        for name, numel in largest.items():
            temp[name] = max(temp[name], int(numel * slot_bytes))
    accumulators = dict.fromkeys(names, 0)
    if setup.training and setup.gradient_accumulation > 1 and setup.accumulator_on_chip:
        for n in names:
            accumulators[n] = (elements[n] * setup.accumulator_element_bytes if setup.accumulator_element_bytes
                               else tbytes[n])
    activations = dict.fromkeys(names, 0)
    for item in table.recompute.stash:
        activations[at(item.position, item.segment)] += item.bytes

    ipus = [seg.ipu for seg in m.segments]
    max_ipu = max(ipus)
    movable_pos = [i for i, n in enumerate(names) if n in st.movable]
    last_movable = movable_pos[-1] if movable_pos else -1
    tied_targets = {st.tied[n] for n in names if n in st.tied}
    # named as the user's model has them (not under Lightning's _forward_module), unless that repeats one
    shown = {n: user_path(n) for n in names}
    if len(set(shown.values())) != len(shown):
        shown = {n: n for n in names}
    layers = []
    for i, n in enumerate(names):
        role = st.roles.get(n, "other")
        tied_to = st.tied.get(n)
        pin = None
        if role == "embeddings" and n in tied_targets:
            pin = "first"
        elif (role in ("loss", "head") and i > last_movable and tied_to is None
              and ipus[seg_of[n]] == max_ipu and max_ipu > 0):
            pin = "last"
        layers.append(Layer(
            name=shown[n] or ROOT_NAME, role=role, block=block_of[n], stage=seg_of[n], ipu=ipus[seg_of[n]],
            fwd_cycles=fwd_int[n], bwd_cycles=bwd_int[n], weight_bytes=weights[n],
            optimizer_bytes=optimizer[n], accumulator_bytes=accumulators[n], activation_bytes=activations[n] if setup.training else 0,
            temporary_bytes=temp[n], pin=pin, tied_to=shown.get(tied_to, tied_to), recompute_bytes=again[n],
            recompute_group=group[n], recompute_cycles=rerun_int[n], checkpoint=n in checkpointed,
            code_bytes=int(round(code[n])), fwd_flops=int(round(flops[n])), bwd_flops=int(round(bflops[n]))))
    notes = [f"Layers at module {st.how}.",
             "Operations outside every layer-level module count with the nearest layer before them in the "
             "same stage; per-layer cycles and bytes add up to each stage's compute and each IPU's layer "
             "memory (inter-IPU copies, syncs and code belong to no layer).",
             "Backward cycles per operation kind (the cost model's), with the recomputed forward added; "
             "activation bytes are what each layer stashes per micro-batch; optimizer state "
             f"{slot_bytes} bytes per trainable element"
             + (" (offloaded: 0; each layer's largest tensor's state, held while its update runs, counts in "
                "its temporary bytes)" if not setup.optimizer_on_chip else "")
             + ("; inference: no optimizer state or stash" if not setup.training else "") + "."]
    if spanning:
        notes.append(f"{', '.join(spanning[:3])}{' ...' if len(spanning) > 3 else ''} run in more than one "
                     "stage (a block starts inside); each is placed on the stage holding most of its cycles, "
                     "its operations elsewhere counting with their neighbours there.")
    if st.split_note:
        notes.append(st.split_note)
    micro = None
    if setup.inputs and setup.inputs[0].shape:
        micro = int(setup.inputs[0].shape[0])
    return LayerTable(layers=tuple(layers), source="emulator", depth=st.depth, micro_batch_size=micro,
                      notes=tuple(notes), recomputation=plan.type.label if setup.training else None)


__all__ = ["UnitTracker", "discover", "layer_table", "prepare"]
