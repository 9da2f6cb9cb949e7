"""Builders that make realistic Reports in a few lines, for popviz's tests and for yours.

>>> from popviz import testing
>>> report = testing.pipeline_report([1000, 3000, 1000, 1000], gradient_accumulation=16,
...                                  memory_frac=[0.6, 0.9, 0.5, 0.5], output_mode="All")

Everything is deterministic: the same arguments give the same Report, so tests can assert exact
numbers. Figures follow the rules documented in ``docs/testing.md``:

* Memory: every tile of IPU ``i`` holds ``round(memory_frac[i] * bytes_per_tile)`` bytes
  (including gaps), except the ``hot_tiles`` you ask for; 98% of a tile's bytes exclude gaps,
  ``always_live_frac`` of those are always live; categories split the bytes by
  :data:`CATEGORY_SPLIT`. A tile above 100% overflows by the excess.
* Execution: one call simulated by :mod:`popviz.schedule`; ``stage_cycles`` are the forward
  cycles per micro-batch, backward costs ``backward_factor`` times as much (2 by default).
* Host I/O: transfers cost ``host_wait_cycles`` waiting plus ``bytes / host_bytes_per_cycle``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from popviz._version import __version__
from popviz.emulator import hardware as _hardware
from popviz.model import (
    ExecutionTable,
    HostIO,
    HostTensor,
    Layer,
    LayerTable,
    MemoryTable,
    ModelConfig,
    Provenance,
    Report,
    Stage,
    Target,
)

HARDWARE: dict[str, dict[str, Any]] = {
    arch: {"tiles_per_ipu": spec.tiles_per_ipu, "bytes_per_tile": spec.bytes_per_tile,
           "clock_hz": spec.clock_hz}
    for arch, spec in _hardware.SPECS.items()
}
"""Per-architecture defaults: the emulator's hardware facts (popviz/emulator/hardware.py, with
their sources in docs/emulator.md)."""

CATEGORY_SPLIT: dict[str, float] = {
    "variable": 0.38,
    "constant": 0.04,
    "vertexCode": 0.14,
    "vertexInstanceState": 0.08,
    "vectorListDescriptor": 0.03,
    "internalExchangeCode": 0.09,
    "globalExchangeCode": 0.03,
    "hostExchangeCode": 0.02,
    "controlCode": 0.07,
    "stack": 0.05,
    "messageBuffers": 0.07,
}
"""How builder tiles split their bytes (excluding gaps) into libpva's memory categories."""

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
               "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of a dense tensor of ``shape`` and ``dtype`` (a name such as ``float16``)."""
    n = 1
    for d in shape:
        n *= int(d)
    try:
        return n * DTYPE_BYTES[dtype.replace("torch.", "")]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}") from None


def make_target(architecture: str = "Mk2", num_ipus: int = 4, *, tiles_per_ipu: int | None = None,
                num_replicas: int = 1) -> Target:
    """A Target with the architecture's tile count, tile memory and clock."""
    hw = dict(HARDWARE[architecture])
    if tiles_per_ipu is not None:
        hw["tiles_per_ipu"] = tiles_per_ipu
    return Target(architecture=architecture, num_ipus=num_ipus * num_replicas,
                  num_replicas=num_replicas, ipus_per_replica=num_ipus, **hw)


def _split(total, fractions: Mapping[str, float]):
    """Split integer array ``total`` by ``fractions``; the last part takes the remainder."""
    import numpy as np

    parts = {}
    rest = total.copy()
    names = list(fractions)
    for name in names[:-1]:
        part = np.floor(total * fractions[name]).astype("int64")
        parts[name] = part
        rest = rest - part
    parts[names[-1]] = rest
    return parts


def tile_memory(target: Target, memory_frac: Sequence[float], *,
                hot_tiles: Mapping[int, Sequence[tuple[int, float]]] | None = None,
                always_live_frac: float = 0.4, categories: Mapping[str, float] | None = CATEGORY_SPLIT
                ) -> MemoryTable:
    """Per-tile memory: tile fill ``memory_frac[ipu]`` on every tile of each IPU, except
    ``hot_tiles[ipu] = [(count, frac), ...]``: ``count`` tiles filled to ``frac`` (above 1.0
    overflows), spread evenly over the IPU."""
    import numpy as np
    import pandas as pd

    tiles = target.tiles_per_ipu
    fills = []
    for ipu, frac in enumerate(memory_frac):
        fill = np.full(tiles, float(frac))
        taken = 0
        for count, hot in (hot_tiles or {}).get(ipu, ()):
            for j in range(count):
                fill[(taken + j) * tiles // max(1, _hot_total(hot_tiles, ipu))] = hot
            taken += count
        fills.append(fill)
    fill = np.concatenate(fills)
    including = np.round(fill * target.bytes_per_tile).astype("int64")
    excluding = np.round(including * 0.98).astype("int64")
    always = np.round(excluding * always_live_frac).astype("int64")
    frame = pd.DataFrame({
        "ipu": np.repeat(np.arange(len(memory_frac)), tiles),
        "tile": np.tile(np.arange(tiles), len(memory_frac)),
        "total_bytes_including_gaps": including,
        "total_bytes_excluding_gaps": excluding,
        "always_live_bytes": always,
        "not_always_live_bytes": excluding - always,
        "overflow_bytes": np.maximum(including - target.bytes_per_tile, 0),
    })
    for name, part in (_split(excluding, categories) if categories else {}).items():
        frame[f"cat_{name}_bytes"] = part
    return MemoryTable(frame, level="tile")


def _hot_total(hot_tiles: Mapping[int, Sequence[tuple[int, float]]] | None, ipu: int) -> int:
    return sum(c for c, _ in (hot_tiles or {}).get(ipu, ()))


def ipu_memory(target: Target, memory_frac: Sequence[float], *, always_live_frac: float = 0.4,
               categories: Mapping[str, float] | None = CATEGORY_SPLIT) -> MemoryTable:
    """Per-IPU memory only (as the emulator gives): IPU ``i`` uses ``memory_frac[i]`` of its
    capacity; excess over capacity is reported as overflow."""
    import numpy as np
    import pandas as pd

    including = np.round(np.asarray(memory_frac, dtype=float) * target.bytes_per_ipu).astype("int64")
    excluding = np.round(including * 0.98).astype("int64")
    always = np.round(excluding * always_live_frac).astype("int64")
    frame = pd.DataFrame({
        "ipu": np.arange(len(memory_frac)),
        "total_bytes_including_gaps": including,
        "total_bytes_excluding_gaps": excluding,
        "always_live_bytes": always,
        "not_always_live_bytes": excluding - always,
        "overflow_bytes": np.maximum(including - target.bytes_per_ipu, 0),
    })
    for name, part in (_split(excluding, categories) if categories else {}).items():
        frame[f"cat_{name}_bytes"] = part
    return MemoryTable(frame, level="ipu")


def pipeline_report(
    stage_cycles: Sequence[int],
    *,
    name: str | None = None,
    mode: str = "training",
    strategy: str | None = "PipelinedExecution",
    gradient_accumulation: int | None = None,
    device_iterations: int | None = None,
    replication_factor: int = 1,
    output_mode: str = "Default",
    output_return_period: int | None = None,
    blocks: Sequence[Sequence[str]] | None = None,
    stage_ipus: Sequence[int] | None = None,
    backward_factor: float = 2.0,
    memory_frac: float | Sequence[float] = 0.5,
    hot_tiles: Mapping[int, Sequence[tuple[int, float]]] | None = None,
    memory_level: str | None = "tile",
    execution: bool = True,
    architecture: str = "Mk2",
    tiles_per_ipu: int | None = None,
    inputs: Mapping[str, tuple[Sequence[int], str]] | None = None,
    outputs: Mapping[str, tuple[Sequence[int], str]] | None = None,
    host_wait_cycles: int = 2000,
    host_bytes_per_cycle: float = 6.0,
    copy_cycles: int = 400,
    optimizer_state_on_chip: bool | None = True,
    available_memory_proportion: Mapping[int, float] | None = None,
    source: str = "bundle",
    estimated: bool = False,
    with_config: bool = True,
    with_host_io: bool = True,
) -> Report:
    """A Report of a model whose forward stage ``i`` costs ``stage_cycles[i]`` per micro-batch
    on IPU ``stage_ipus[i]`` (default ``i``).

    ``memory_level`` is ``"tile"``, ``"ipu"`` or None (no memory); ``execution=False`` leaves
    the execution out (as after an out-of-memory compile). Defaults: G = 16 for training, D = 1;
    pipelined inference uses D = 2·N. ``inputs``/``outputs`` map names to (per-micro-batch
    shape, dtype); by default one float32 input of (16, 784) and, for training, a scalar loss,
    for inference (16, 10) logits.
    """
    from popviz.schedule import HostTransfer, SchedulePlan, StageWork, simulate

    n = len(stage_cycles)
    training = mode == "training"
    stage_ipus = list(stage_ipus) if stage_ipus is not None else list(range(n))
    num_ipus = max(stage_ipus) + 1
    if gradient_accumulation is None:
        gradient_accumulation = 16 if training else 1
    if device_iterations is None:
        device_iterations = 2 * n if (not training and strategy == "PipelinedExecution" and n > 1) else 1
    fracs = [float(memory_frac)] * num_ipus if isinstance(memory_frac, (int, float)) else list(memory_frac)
    tgt = make_target(architecture, num_ipus, tiles_per_ipu=tiles_per_ipu, num_replicas=replication_factor)
    blocks = [list(b) for b in blocks] if blocks is not None else [[f"B{i + 1}"] for i in range(n)]
    inputs = dict(inputs) if inputs is not None else {"input": ((16, 784), "float32")}
    if outputs is None:
        outputs = {"loss": ((), "float32")} if training else {"output": ((16, 10), "float32")}
    tensors = [HostTensor(k, "input", s, d, tensor_bytes(s, d)) for k, (s, d) in inputs.items()]
    tensors += [HostTensor(k, "output", s, d, tensor_bytes(s, d)) for k, (s, d) in outputs.items()]
    config = ModelConfig(
        mode=mode,
        execution_strategy=strategy if n > 1 else None,
        stages=tuple(Stage(i, stage_ipus[i], tuple(blocks[i])) for i in range(n)),
        gradient_accumulation=gradient_accumulation,
        device_iterations=device_iterations,
        replication_factor=replication_factor,
        output_mode=output_mode,
        output_return_period=output_return_period,
        optimizer_state_on_chip=optimizer_state_on_chip if training else None,
        available_memory_proportion=dict(available_memory_proportion or {}),
    )
    exe = None
    if execution:
        def transfer(nbytes: int) -> HostTransfer:
            return HostTransfer(host_wait_cycles, int(round(nbytes / host_bytes_per_cycle)))

        in_bytes = sum(t.bytes for t in tensors if t.direction == "input")
        out_bytes = sum(t.bytes for t in tensors if t.direction == "output")
        plan = SchedulePlan(
            stages=[StageWork(stage_ipus[i], int(c), int(round(c * backward_factor)) if training else 0)
                    for i, c in enumerate(stage_cycles)],
            mode=mode, strategy=strategy, gradient_accumulation=gradient_accumulation,
            device_iterations=device_iterations, output_mode=config.effective_output_mode or "Final",
            output_return_period=output_return_period or 1,
            copy_cycles=[copy_cycles if stage_ipus[i] != stage_ipus[i + 1] else 0 for i in range(n - 1)],
            input_transfer=transfer(in_bytes), output_transfer=transfer(out_bytes),
            weight_update_cycles={ipu: sum(int(c) for i, c in enumerate(stage_cycles) if stage_ipus[i] == ipu) // 2
                                  for ipu in set(stage_ipus)},
            sync_cycles=50,
        )
        exe = ExecutionTable(simulate(plan))
    memory = None
    if memory_level == "tile":
        memory = tile_memory(tgt, fracs, hot_tiles=hot_tiles)
    elif memory_level == "ipu":
        memory = ipu_memory(tgt, fracs)
    return Report(
        name=name or mode,
        provenance=Provenance(source=source, estimated=estimated, tool="popviz.testing",
                              versions={"popviz": __version__}),
        target=tgt,
        memory=memory,
        execution=exe,
        config=config if with_config else None,
        host_io=HostIO(tensors=tuple(tensors)) if with_host_io else None,
    )


def single_ipu_report(forward_cycles: int = 5000, **kwargs: Any) -> Report:
    """A model on one IPU, no execution strategy."""
    kwargs.setdefault("strategy", None)
    return pipeline_report([forward_cycles], **kwargs)


def _per_layer(value: int | Sequence[int], n: int, what: str) -> list[int]:
    values = [int(value)] * n if isinstance(value, int) else [int(v) for v in value]
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} values for {n} layers")
    return values


def layer_table(
    fwd_cycles: Sequence[int],
    *,
    names: Sequence[str] | None = None,
    roles: Sequence[str] | None = None,
    pins: Sequence[str | None] | None = None,
    tied_to: Sequence[str | None] | None = None,
    layers_per_ipu: Sequence[int] | None = None,
    backward_factor: float = 2.0,
    weight_bytes: int | Sequence[int] = 0,
    optimizer_bytes: int | Sequence[int] = 0,
    activation_bytes: int | Sequence[int] = 0,
    temporary_bytes: int | Sequence[int] = 0,
    source: str = "emulator",
    micro_batch_size: int | None = None,
) -> LayerTable:
    """A LayerTable of ``len(fwd_cycles)`` layers in order (names ``layer.0``... by default),
    backward ``round(backward_factor × forward)`` cycles.

    ``layers_per_ipu`` places them: entry ``i`` counts the layers of role ``layer`` on IPU ``i``
    (optimum-graphcore's meaning); the other roles go with the next ``layer`` (with the previous
    one at the end of the model). Without it, no placement is recorded. ``tied_to`` names, per
    layer, the layer whose weights it shares (a tied projection), or None.
    """
    n = len(fwd_cycles)
    names = list(names) if names is not None else [f"layer.{i}" for i in range(n)]
    roles = list(roles) if roles is not None else ["layer"] * n
    pins = list(pins) if pins is not None else [None] * n
    tied = list(tied_to) if tied_to is not None else [None] * n
    ipus: list[int | None] = [None] * n
    if layers_per_ipu is not None:
        units = [i for i, r in enumerate(roles) if r == "layer"]
        if sum(layers_per_ipu) != len(units):
            raise ValueError(f"layers_per_ipu {list(layers_per_ipu)} must add up to {len(units)}")
        owner = [ipu for ipu, k in enumerate(layers_per_ipu) for _ in range(k)]
        for unit, ipu in zip(units, owner, strict=True):
            ipus[unit] = ipu
        nxt = None
        for i in range(n - 1, -1, -1):  # other roles: with the next layer, else the previous one
            if ipus[i] is None:
                ipus[i] = nxt
            nxt = ipus[i]
        prev = 0
        for i in range(n):
            if ipus[i] is None:
                ipus[i] = prev
            prev = ipus[i]
    cols = {k: _per_layer(v, n, k) for k, v in (
        ("weight_bytes", weight_bytes), ("optimizer_bytes", optimizer_bytes),
        ("activation_bytes", activation_bytes), ("temporary_bytes", temporary_bytes))}
    layers = tuple(
        Layer(name=names[i], role=roles[i], block=None if ipus[i] is None else f"ipu{ipus[i]}",
              stage=ipus[i], ipu=ipus[i], fwd_cycles=int(fwd_cycles[i]),
              bwd_cycles=int(round(fwd_cycles[i] * backward_factor)), pin=pins[i], tied_to=tied[i],
              **{k: v[i] for k, v in cols.items()})
        for i in range(n))
    return LayerTable(layers=layers, source=source, micro_batch_size=micro_batch_size,
                      notes=("built by popviz.testing",))


def bert_layers(num_layers: int = 24, *, hidden: int = 1024, seq: int = 128, micro_batch_size: int = 1,
                vocab: int = 30522, layers_per_ipu: Sequence[int] | None = None,
                training: bool = True, optimizer_bytes_per_param: int = 8,
                source: str = "emulator") -> LayerTable:
    """A BERT-like encoder in float16: embeddings (pinned to the first IPU), ``num_layers``
    identical encoder layers, the tied MLM head and the loss (pinned to the last IPU).

    Per encoder layer: ``12·h² + 13·h`` parameters (2 bytes each, plus
    ``optimizer_bytes_per_param`` each of optimizer state in training); forward cycles
    ``24·b·s·h² / 1024`` (a matmul rate of 1,024 FLOP/cycle... an illustrative figure);
    activations ``b·s·(34·h + 5·a·s)`` bytes with ``a = h/64`` heads; temporaries ``4·b·s·h·4``
    bytes. The embeddings hold ``(vocab + 512 + 2)·h`` parameters; the head ``vocab`` (its bias:
    the projection is tied to the embeddings)."""
    b, s, h = micro_batch_size, seq, hidden
    heads = max(1, h // 64)
    layer_params = 12 * h * h + 13 * h
    emb_params = (vocab + 512 + 2) * h
    opt = optimizer_bytes_per_param if training else 0
    names = ["embeddings", *(f"encoder.layer.{i}" for i in range(num_layers)), "cls", "loss"]
    roles = ["embeddings", *(["layer"] * num_layers), "head", "loss"]
    pins = ["first", *([None] * num_layers), "last", "last"]
    fwd = [b * s * h // 64, *([24 * b * s * h * h // 1024] * num_layers), 2 * b * s * h * vocab // 1024,
           b * s * vocab // 64]
    params = [emb_params, *([layer_params] * num_layers), vocab, 0]
    act = [b * s * h * 2, *([b * s * (34 * h + 5 * heads * s)] * num_layers), b * s * vocab * 2, 0]
    temp = [b * s * h * 4, *([16 * b * s * h] * num_layers), b * s * vocab * 4, b * s * vocab * 4]
    return layer_table(fwd, names=names, roles=roles, pins=pins, layers_per_ipu=layers_per_ipu,
                       backward_factor=2.0 if training else 0.0,
                       weight_bytes=[2 * p for p in params], optimizer_bytes=[opt * p for p in params],
                       activation_bytes=act, temporary_bytes=temp, source=source,
                       micro_batch_size=micro_batch_size)


def cnn_layers(*, channels: Sequence[int] = (64, 128, 256, 512), blocks_per_stage: int = 2,
               image: int = 224, micro_batch_size: int = 8, layers_per_ipu: Sequence[int] | None = None,
               training: bool = True, optimizer_bytes_per_param: int = 8) -> LayerTable:
    """A ResNet-like CNN in float16: a stem (pinned first), ``blocks_per_stage`` 3×3 conv blocks
    per entry of ``channels`` (the resolution halving at each), and a classifier head (pinned
    last). Early blocks have large activations and few weights, late blocks the reverse."""
    b = micro_batch_size
    names, roles, pins, fwd, params, act, temp = ["stem"], ["embeddings"], ["first"], [], [], [], []
    res = image // 4
    fwd.append(b * res * res * 64 * 147 * 2 // 1024)
    params.append(147 * 64)
    act.append(b * res * res * 64 * 2 * 2)
    temp.append(b * res * res * 64 * 2)
    c_in = 64
    for k, c in enumerate(channels):
        if k:
            res //= 2
        for j in range(blocks_per_stage):
            names.append(f"layer{k + 1}.{j}")
            roles.append("layer")
            pins.append(None)
            p = 9 * c_in * c + 9 * c * c
            params.append(p)
            fwd.append(b * res * res * p * 2 // 1024)
            act.append(b * res * res * c * 2 * 4)
            temp.append(b * res * res * c * 2 * 2)
            c_in = c
    names.append("fc")
    roles.append("head")
    pins.append("last")
    params.append(c_in * 1000 + 1000)
    fwd.append(b * c_in * 1000 * 2 // 1024)
    act.append(b * c_in * 2)
    temp.append(b * 1000 * 4)
    opt = optimizer_bytes_per_param if training else 0
    return layer_table(fwd, names=names, roles=roles, pins=pins, layers_per_ipu=layers_per_ipu,
                       backward_factor=2.0 if training else 0.0,
                       weight_bytes=[2 * p for p in params], optimizer_bytes=[opt * p for p in params],
                       activation_bytes=act, temporary_bytes=temp, micro_batch_size=b)


def layered_report(layers: LayerTable, *, code_bytes: int = 0, mode: str | None = None,
                   optimizer_state_on_chip: bool | None = True, **kwargs: Any) -> Report:
    """A Report whose execution and per-IPU memory follow ``layers`` and its placement: stage
    ``i`` runs the layers on IPU ``i`` (their forward cycles summed, backward in the table's
    overall backward/forward ratio); IPU ``i`` holds what :mod:`popviz.analysis.planner` says
    its layers need at their stash depth, plus ``code_bytes``. Other arguments go to
    :func:`pipeline_report` (``memory_level`` defaults to ``"ipu"``)."""
    from popviz.analysis.layer_costs import layer_costs
    from popviz.analysis.planner import PlanSettings, evaluate

    if any(x.ipu is None for x in layers):
        raise ValueError("every layer needs an IPU (build the table with layers_per_ipu)")
    costs = layer_costs(layers)
    by_name = {x.name: x for x in layers}
    ipus = [by_name[c.name].ipu for c in costs]
    n_ipus = max(ipus) + 1
    counts = [ipus.count(i) for i in range(n_ipus)]
    fwd = sum(x.fwd_cycles for x in layers)
    bwd = sum(x.bwd_cycles for x in layers)
    if mode is None:
        mode = "training" if bwd else "inference"
    training = mode == "training"
    kwargs.setdefault("memory_level", "ipu")
    arch = kwargs.get("architecture", "Mk2")
    hw = HARDWARE[arch]
    capacity = (kwargs.get("tiles_per_ipu") or hw["tiles_per_ipu"]) * hw["bytes_per_tile"]
    settings = PlanSettings(capacity_bytes=capacity, training=training,
                            offload_optimizer=optimizer_state_on_chip is False, code_bytes=code_bytes)
    split = evaluate(costs, counts, settings)
    kwargs.setdefault("memory_frac", [st.memory_bytes / capacity for st in split.stages])
    stage_cycles = [sum(x.fwd_cycles for x in layers if x.ipu == i) for i in range(n_ipus)]
    kwargs.setdefault("blocks", [[f"ipu{i}"] for i in range(n_ipus)])
    report = pipeline_report(stage_cycles, mode=mode, backward_factor=bwd / fwd if fwd else 0.0,
                             optimizer_state_on_chip=optimizer_state_on_chip, **kwargs)
    return report.replace(layers=layers)


__all__ = ["CATEGORY_SPLIT", "HARDWARE", "bert_layers", "cnn_layers", "ipu_memory", "layer_table",
           "layered_report", "make_target", "pipeline_report", "single_ipu_report", "tensor_bytes",
           "tile_memory"]
