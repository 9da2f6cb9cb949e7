"""The model's FLOPs per module, counted by the capture hooks when the executor compiles.

On a real IPU the profile has cycles but no FLOPs; the hooks see the user's model and the shapes
of the call that compiled. :func:`count_model_flops` runs the model's forward (and, for a training
model, the backward of its loss) once on tensors without data, of one micro-batch's shapes:
``meta`` tensors first (shapes and dtypes propagate, nothing is computed), and, when the forward
mixes them with tensors it makes on the CPU, PyTorch's ``FakeTensorMode`` (which fakes those too).
Either imports ``torch._dynamo`` on first use (torch's Python meta kernels guard themselves
against it): about 4 s once per process on this project's CI machine, beside an IPU compile of
minutes (``POPVIZ_CAPTURE_FLOPS=0`` turns counting off). The real parameters, buffers and
gradients are never touched: ``torch.func.functional_call`` binds data-less copies of them. Each operation
that ``torch.utils.flop_counter`` has a formula for (matrix products, convolutions, attention) is
counted with it, on the module that ran it: in the forward, the innermost module running; in the
backward, the module whose forward made the autograd node running
(``torch._C._current_autograd_node``), so a module's backward is its own.

What it records (the ``flops`` object of ``popviz-model.json``, docs/capture.md):

* per module path (``""`` the model itself), its own forward and backward FLOPs per micro-batch:
  those of the operations run while it was the innermost module running, so the figures of
  nested modules add up without counting anything twice;
* the operations that ran without a formula (element-wise ones counted together, the rest by
  name): their FLOPs are not in the figures, and the record says so;
* how long counting took.

PopTorch's own operations (``torch.ops.poptorch``) have Meta kernels (PopTorch's
``poptorch/source/dispatch_tracer/RegisterMetaOps.cpp.inc``), so they run on data-less tensors as
they are, except those without an autograd formula outside PopTorch's tracing
(``RegisterAtenOverloads.cpp``): ``identity_loss`` is computed as its CPU kernel does (sum, mean
or a copy, same file) so the loss has a backward to count, and the operations that return their
first argument (``recomputation_checkpoint``, ``set_available_memory``, ...) are that argument.

Anything that fails (an operation without a Meta kernel, data-dependent control flow)
gives a record with the reason and no figures: the program itself is never disturbed. This
module imports torch only when it counts (the program imported it already).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

FLOPS_ENV = "POPVIZ_CAPTURE_FLOPS"
"""Set to ``0`` to skip counting (the record then says it was turned off)."""
MAX_NAMED_OPS = 12
"""Operations without a formula listed by name (the most called first); the rest are counted."""
_NO_WORK = frozenset((
    "aten.detach", "aten.t", "aten.view", "aten._unsafe_view", "aten.reshape", "aten.expand",
    "aten.transpose", "aten.permute", "aten.squeeze", "aten.unsqueeze", "aten.slice", "aten.select",
    "aten.split", "aten.split_with_sizes", "aten.unbind", "aten.as_strided", "aten.alias",
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten.zeros", "aten.zeros_like", "aten.ones", "aten.ones_like", "aten.full", "aten.full_like",
    "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.scalar_tensor", "aten.lift_fresh",
    "aten._to_copy", "aten.copy_", "aten.clone", "aten._reshape_alias", "aten.contiguous",
    "aten.fill_", "aten.zero_", "aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.set_",
))
"""Operations that move, view or create tensors: no arithmetic, so not listed as uncounted."""


RETURNING_FIRST_ARGUMENT = frozenset(f"poptorch::{op}" for op in (
    "recomputation_checkpoint", "set_available_memory", "ipu_print_tensor", "nop", "set_matmul_serialization",
    "set_overlap_for_input", "set_overlap_for_output"))
"""PopTorch operations whose CPU kernel returns their first argument (``opReturningFirstArgument``
in RegisterAtenOverloads.cpp) and which have no autograd formula there: taken as that argument, so
the backward reaches what comes before them (``poptorch.recomputationCheckpoint`` would otherwise
cut the gradient, and the backward FLOPs before it)."""


def skip_reason(executor: Any) -> str | None:
    """Why counting is off for ``executor``, or None."""
    if os.environ.get(FLOPS_ENV, "").strip() == "0":
        return f"turned off ({FLOPS_ENV}=0)"
    import sys

    if type(executor).__module__.startswith("popviz.emulator"):
        return "the emulator ran this model: its report counts the FLOPs"
    if "torch" not in sys.modules:
        return "torch is not imported in this program"
    return None


def _qualified(func: Any) -> str:
    packet = getattr(func, "_overloadpacket", func)
    return str(getattr(packet, "_qualified_op_name", "") or "")


def _map(x: Any, fn: Any) -> Any:
    """``x`` with every tensor replaced by ``fn(tensor)`` (tuples, lists and dicts followed)."""
    import torch

    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (tuple, list)):
        return type(x)(_map(item, fn) for item in x) if type(x) in (tuple, list) else x
    if isinstance(x, Mapping):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _tensors(x: Any) -> list[Any]:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensors(item)]
    if isinstance(x, Mapping):
        return [t for item in x.values() for t in _tensors(item)]
    return []


def _loss_of(output: Any) -> tuple[list[Any], str]:
    """The tensors whose backward a training step runs: the one scalar output with a gradient
    (PopTorch's loss), else every output with one."""
    grads = [t for t in _tensors(output) if t.requires_grad and t.is_floating_point()]
    scalars = [t for t in grads if t.dim() == 0]
    if len(scalars) == 1:
        return scalars, "loss"
    return grads, "outputs"


def count_model_flops(model: Any, args: tuple, kwargs: Mapping[str, Any], micro_batches: int | None,
                      training: bool) -> dict[str, Any]:
    """The ``flops`` record for one micro-batch of the call ``model(*args, **kwargs)`` (which
    holds ``micro_batches`` of them along dim 0)."""
    t0 = time.perf_counter()
    record: dict[str, Any] = {"status": "failed", "reason": None, "counted_by": None,
                              "micro_batches_per_call": micro_batches, "seconds": None}
    for kind in ("meta", "fake"):
        try:
            record.update(_count(model, args, dict(kwargs), micro_batches, training, kind))
            record["status"] = "counted"
            record["reason"] = None
            break
        except _NotCounted as exc:
            record["reason"] = str(exc)
            break
        except Exception as exc:  # meta tensors first (cheap); fake ones fake factories too
            first = (str(exc).splitlines() or [""])[0][:200]
            record["reason"] = f"the model did not run on {kind} tensors ({type(exc).__name__}: {first})"
    record["seconds"] = round(time.perf_counter() - t0, 4)
    return record


class _NotCounted(Exception):
    pass



def _count(model: Any, args: tuple, kwargs: dict[str, Any], micro_batches: int | None,
           training: bool, kind: str) -> dict[str, Any]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call
    from torch.nn.modules import module as nn_module
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(model, torch.nn.Module):
        raise _NotCounted("the executor's model is not a torch.nn.Module")
    if micro_batches is None:
        raise _NotCounted("the micro-batches per call (D·G·R) are unknown")
    n = micro_batches
    inputs = _tensors((args, kwargs))
    if not inputs:
        raise _NotCounted("the call had no tensor inputs")
    for t in inputs:
        if t.dim() == 0 or t.shape[0] % n:
            raise _NotCounted(f"an input of shape {list(t.shape)} does not divide into {n} micro-batches "
                              "along dim 0")
    if kind == "meta":  # shapes and dtypes only; tensors the forward creates default to meta too
        context: Any = torch.device("meta")

        def fake(t: Any) -> Any:
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
    else:  # FakeTensorMode: also fakes the tensors the forward makes on the CPU
        context = FakeTensorMode()
        fake = context.from_tensor
    # one micro-batch: the first slice along dim 0 (a view; its data is never read)
    f_args, f_kwargs = _map((args, kwargs), lambda t: fake(t[: t.shape[0] // n].detach()))
    params = {k: fake(p.detach()).requires_grad_(p.requires_grad and training)
              for k, p in model.named_parameters()}
    buffers = {k: fake(b.detach()) for k, b in model.named_buffers()}
    trainable = [p for p in params.values() if p.requires_grad]
    formulas = FlopCounterMode(display=False).flop_registry
    paths = {id(m): p for p, m in model.named_modules()}
    stack: list[str] = []
    node_module: dict[Any, str] = {}
    """Autograd node -> the module whose forward made it (its backward is that module's)."""
    fwd: dict[str, int] = {}
    bwd: dict[str, int] = {}
    named: dict[str, int] = {}
    counts = {"elementwise": 0, "unattributed_backward": 0}

    def current() -> str:
        return stack[-1] if stack else ""

    def pre_hook(module: Any, _inputs: Any) -> None:
        stack.append(paths.get(id(module), current()))

    def post_hook(_module: Any, _inputs: Any, _output: Any) -> None:
        if stack:
            stack.pop()

    def tag(output: Any) -> None:
        """Map the autograd nodes this call made (reachable, not yet mapped) to the module."""
        owner = current()
        todo = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node is None or node in node_module:
                continue
            node_module[node] = owner
            todo.extend(fn for fn, _ in node.next_functions if fn is not None)

    class Census(TorchDispatchMode):
        """FLOPs of each operation with a formula, by module and pass; the others by kind."""

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = getattr(func, "_overloadpacket", None)
            formula = formulas.get(packet) if packet is not None else None
            if formula is not None:
                flops = int(formula(*args, **kwargs, out_val=out))
                node = torch._C._current_autograd_node()
                if node is None:
                    fwd[current()] = fwd.get(current(), 0) + flops
                elif node in node_module:
                    owner = node_module[node]
                    bwd[owner] = bwd.get(owner, 0) + flops
                else:  # a backward node the forward did not make through a call seen (kept at the root)
                    bwd[""] = bwd.get("", 0) + flops
                    counts["unattributed_backward"] += flops
            elif packet is not None:
                name = str(packet)
                if getattr(func, "is_view", False) or name in _NO_WORK or name.startswith(("poptorch.", "prim.")):
                    pass
                elif torch.Tag.pointwise in getattr(func, "tags", ()):
                    counts["elementwise"] += 1
                else:
                    named[name] = named.get(name, 0) + 1
            return out

    class Tagger(TorchFunctionMode):
        """Tags autograd nodes with their module; ``poptorch.identity_loss`` as PopTorch's CPU
        kernel computes it (so the loss has a backward)."""

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            name = _qualified(func)
            if name == "poptorch::identity_loss":
                x, reduction = args[0], (args[1] if len(args) > 1 else kwargs.get("reduction"))
                out = x.sum() if reduction == 0 else x.mean() if reduction == 1 else x.clone()
            elif name in RETURNING_FIRST_ARGUMENT and args:
                return args[0]  # what PopTorch's CPU kernel returns; the gradient flows through
            else:
                out = func(*args, **kwargs)
            if training:
                tag(out)
            return out

    backward_from = None
    why_no_backward = None
    handles = [nn_module.register_module_forward_pre_hook(pre_hook)]
    try:
        handles.append(nn_module.register_module_forward_hook(post_hook, always_call=True))
        with context, Census(), Tagger(), torch.set_grad_enabled(training):
            output = functional_call(model, {**params, **buffers}, f_args, f_kwargs)
            stack.clear()
            if training:
                losses, backward_from = _loss_of(output)
                if not losses:
                    why_no_backward = "no output of the model has a gradient"
                elif not trainable:
                    why_no_backward = "the model has no trainable parameters"
                else:
                    torch.autograd.grad(losses, trainable, [torch.ones_like(t) for t in losses],
                                        allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
    counted_bwd = training and why_no_backward is None
    modules = [{"module": k, "fwd_flops": fwd.get(k, 0), "bwd_flops": bwd.get(k, 0) if counted_bwd else None}
               for k in sorted(set(fwd) | set(bwd))]
    modules = [m for m in modules if m["fwd_flops"] or m["bwd_flops"]]
    ranked = sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "counted_by": f"torch.utils.flop_counter formulas (torch {torch.__version__}) on {kind} tensors",
        "micro_batch_inputs": [[int(d) for d in t.shape] for t in _tensors((f_args, f_kwargs))],
        "forward_flops": sum(fwd.values()),
        "backward_flops": sum(bwd.values()) if counted_bwd else None,
        "backward_from": backward_from if counted_bwd else None,
        "backward_not_counted": why_no_backward,
        "modules": modules,
        "uncounted_ops": [{"op": k, "calls": v} for k, v in ranked[:MAX_NAMED_OPS]],
        "uncounted_other_calls": sum(v for _, v in ranked[MAX_NAMED_OPS:]),
        "elementwise_calls": counts["elementwise"],
    }


__all__ = ["FLOPS_ENV", "count_model_flops", "skip_reason"]
