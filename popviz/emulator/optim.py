"""``poptorch.optim``: SGD, Adam, AdamW, RMSprop and LAMB with PopTorch's signatures.

They are PyTorch's optimizers (LAMB is implemented here, PyTorch has none) that also accept
PopTorch's extra arguments (``loss_scaling``, ``accum_type``, ``max_grad_norm``, ...). An
argument left at ``None`` takes PyTorch's default. The extras are recorded; the cost model uses
the accumulator types for memory, and the executor applies ``max_grad_norm`` (global gradient
norm clipping before the update). ``loss_scaling`` does not change float32 results and is not
applied; ``bias_correction=False`` (AdamW) and ``use_tf_variant`` (RMSprop) are recorded only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

FLOAT_TYPES = (torch.float16, torch.float32)
ACCUM_TYPE_MESSAGE = "Accumulation types must be either torch.float32 or torch.float16"


def _given(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


def _explicit(arguments: dict[str, Any]) -> list[str]:
    """The constructor arguments a caller gave (not None): PopTorch treats them as variable."""
    return [name for name, value in arguments.items() if name not in ("self", "__class__") and value is not None]


class VariableAttributes:
    """Which optimizer attributes are variable (may change with ``setOptimizer``) or constant, as
    PopTorch tracks them (``poptorch/optim.py``): the attributes the constructor was given are
    variable; ``markAsConstant`` / ``markAsVariable`` accept only the optimizer's own
    attributes (its ``defaults`` and ``loss_scaling``), with PopTorch's assertion otherwise."""

    def __init__(self, variable_attributes: list[str], allowed_attributes: list[str]) -> None:
        self._variable_attributes = list(variable_attributes)
        self._allowed_attributes = list(allowed_attributes)

    def isConstant(self, attr: str) -> bool:
        return attr not in self._variable_attributes

    def markAsConstant(self, attr: str) -> None:
        assert attr in self._allowed_attributes, (
            f"Unknown attribute {attr}, allowed values: {self._allowed_attributes}")
        self._variable_attributes = [a for a in self._variable_attributes if a != attr]

    def markAsVariable(self, attr: str) -> None:
        assert attr in self._allowed_attributes, (
            f"Unknown attribute {attr}, allowed values: {self._allowed_attributes}")
        self._variable_attributes.append(attr)

    def constants(self) -> list[str]:
        """The allowed attributes currently constant (recorded in the report's options)."""
        return [a for a in self._allowed_attributes if self.isConstant(a)]


class Optimizer:
    """What PopTorch's optimizers add to PyTorch's: recorded extra attributes."""

    _extras: tuple[str, ...] = ()

    def _set_extras(self, variables: list[str], **extras: Any) -> None:
        for name in ("accum_type", "velocity_accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type"):
            if name in extras:
                if extras[name] is None:
                    extras[name] = torch.float32
                assert extras[name] in FLOAT_TYPES, ACCUM_TYPE_MESSAGE
        if extras.get("loss_scaling") is None and "loss_scaling" in extras:
            extras["loss_scaling"] = 1.0
        if "max_grad_norm" in extras and extras["max_grad_norm"] is None:
            extras["max_grad_norm"] = float("inf")
        for name, value in extras.items():
            setattr(self, name, value)
        self._extras = tuple(extras)
        self.variable_attrs = VariableAttributes(variables, [*self.defaults, "loss_scaling"])

    def extras(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._extras}


class SGD(Optimizer, torch.optim.SGD):
    def __init__(self, params: Iterable, lr: float, momentum: float | None = None,
                 dampening: float | None = None, weight_decay: float | None = None,
                 nesterov: bool | None = None, maximize: bool | None = None, foreach: bool | None = None,
                 differentiable: bool | None = None, loss_scaling: float | None = None,
                 velocity_scaling: float | None = None, use_combined_accum: bool | None = None,
                 accum_type: torch.dtype | None = None, velocity_accum_type: torch.dtype | None = None,
                 max_grad_norm: float | None = None) -> None:
        variables = _explicit(locals())
        torch.optim.SGD.__init__(self, params, lr=lr, **_given(
            momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
            maximize=maximize, foreach=foreach, differentiable=differentiable))
        self._set_extras(variables, loss_scaling=loss_scaling, velocity_scaling=velocity_scaling or 1.0,
                         use_combined_accum=bool(use_combined_accum), accum_type=accum_type,
                         velocity_accum_type=velocity_accum_type, max_grad_norm=max_grad_norm)


class Adam(Optimizer, torch.optim.Adam):
    def __init__(self, params: Iterable, lr: float | None = None, betas: tuple[float, float] | None = None,
                 eps: float | None = None, weight_decay: float | None = None, amsgrad: bool | None = None,
                 foreach: bool | None = None, maximize: bool | None = None, capturable: bool | None = None,
                 differentiable: bool | None = None, fused: bool | None = None,
                 loss_scaling: float | None = None, accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None,
                 max_grad_norm: float | None = None) -> None:
        variables = _explicit(locals())
        torch.optim.Adam.__init__(self, params, **_given(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, foreach=foreach,
            maximize=maximize, capturable=capturable, differentiable=differentiable, fused=fused))
        self._set_extras(variables, loss_scaling=loss_scaling, accum_type=accum_type,
                         first_order_momentum_accum_type=first_order_momentum_accum_type,
                         second_order_momentum_accum_type=second_order_momentum_accum_type,
                         max_grad_norm=max_grad_norm)


class AdamW(Optimizer, torch.optim.AdamW):
    def __init__(self, params: Iterable, lr: float | None = None, betas: tuple[float, float] | None = None,
                 eps: float | None = None, weight_decay: float | None = None, amsgrad: bool | None = None,
                 maximize: bool | None = None, foreach: bool | None = None, capturable: bool | None = None,
                 differentiable: bool | None = None, fused: bool | None = None,
                 loss_scaling: float | None = None, bias_correction: bool | None = None,
                 accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None,
                 max_grad_norm: float | None = None) -> None:
        variables = _explicit(locals())
        torch.optim.AdamW.__init__(self, params, **_given(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
            foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused))
        self._set_extras(variables, loss_scaling=loss_scaling,
                         bias_correction=True if bias_correction is None else bias_correction,
                         accum_type=accum_type,
                         first_order_momentum_accum_type=first_order_momentum_accum_type,
                         second_order_momentum_accum_type=second_order_momentum_accum_type,
                         max_grad_norm=max_grad_norm)


class RMSprop(Optimizer, torch.optim.RMSprop):
    def __init__(self, params: Iterable, lr: float | None = None, alpha: float | None = None,
                 eps: float | None = None, weight_decay: float | None = None, momentum: float | None = None,
                 centered: bool | None = None, foreach: bool | None = None, maximize: bool | None = None,
                 differentiable: bool | None = None, loss_scaling: float | None = None,
                 accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None,
                 use_tf_variant: bool | None = None) -> None:
        variables = _explicit(locals())
        torch.optim.RMSprop.__init__(self, params, **_given(
            lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered,
            foreach=foreach, maximize=maximize, differentiable=differentiable))
        self._set_extras(variables, loss_scaling=loss_scaling, accum_type=accum_type,
                         first_order_momentum_accum_type=first_order_momentum_accum_type,
                         second_order_momentum_accum_type=second_order_momentum_accum_type,
                         use_tf_variant=bool(use_tf_variant))


class LAMB(Optimizer, torch.optim.Optimizer):
    """Layer-wise adaptive moments (You et al., 2019): an Adam step scaled per parameter tensor by
    the trust ratio ||w|| / ||update||, with ||w|| capped at ``max_weight_norm``."""

    def __init__(self, params: Iterable, lr: float | None = None, betas: tuple[float, float] | None = None,
                 eps: float | None = None, weight_decay: float | None = None,
                 bias_correction: bool | None = None, loss_scaling: float | None = None,
                 max_weight_norm: float | None = None, accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None) -> None:
        variables = _explicit(locals())
        defaults = {"lr": 1e-3 if lr is None else lr, "betas": (0.9, 0.999) if betas is None else betas,
                    "eps": 1e-8 if eps is None else eps,
                    "weight_decay": 1e-2 if weight_decay is None else weight_decay,
                    "max_weight_norm": 65500.0 if max_weight_norm is None else max_weight_norm}
        torch.optim.Optimizer.__init__(self, params, defaults)
        self._set_extras(variables, loss_scaling=loss_scaling,
                         bias_correction=True if bias_correction is None else bias_correction,
                         max_weight_norm=defaults["max_weight_norm"], accum_type=accum_type,
                         first_order_momentum_accum_type=first_order_momentum_accum_type,
                         second_order_momentum_accum_type=second_order_momentum_accum_type)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(param.grad, 1 - beta1)
                v.mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                m_hat, v_hat = m, v
                if self.bias_correction:
                    m_hat = m / (1 - beta1 ** state["step"])
                    v_hat = v / (1 - beta2 ** state["step"])
                update = m_hat / (v_hat.sqrt() + group["eps"]) + group["weight_decay"] * param
                weight_norm = float(param.norm().clamp(max=group["max_weight_norm"]))
                update_norm = float(update.norm())
                trust = weight_norm / update_norm if weight_norm > 0 and update_norm > 0 else 1.0
                param.add_(update, alpha=-group["lr"] * trust)
        return loss


def state_slots(optimizer: torch.optim.Optimizer) -> list[tuple[str, int]]:
    """The optimizer's state tensors per parameter, as (name, bytes per element), for the cost
    model. Accumulator types come from PopTorch's arguments; float32 by default."""

    def size(attr: str) -> int:
        dtype = getattr(optimizer, attr, torch.float32) or torch.float32
        return torch.empty((), dtype=dtype).element_size()

    defaults = optimizer.defaults
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW, LAMB)):
        slots = [("first_moment", size("first_order_momentum_accum_type")),
                 ("second_moment", size("second_order_momentum_accum_type"))]
        if defaults.get("amsgrad"):
            slots.append(("max_second_moment", size("second_order_momentum_accum_type")))
        return slots
    if isinstance(optimizer, torch.optim.SGD):
        return [("velocity", size("velocity_accum_type"))] if defaults.get("momentum") else []
    if isinstance(optimizer, torch.optim.RMSprop):
        slots = [("square_average", size("second_order_momentum_accum_type"))]
        if defaults.get("momentum"):
            slots.append(("momentum", size("first_order_momentum_accum_type")))
        if defaults.get("centered"):
            slots.append(("grad_average", size("first_order_momentum_accum_type")))
        return slots
    return [("state", 4), ("state", 4)]  # unknown optimizer: assume two float32 tensors, like Adam


def describe(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """JSON-compatible summary (type and hyper-parameters) for the report's options."""
    out: dict[str, Any] = {"type": type(optimizer).__name__}
    for key, value in optimizer.defaults.items():
        if isinstance(value, (int, float, bool, str)) or value is None:
            out[key] = value
        elif isinstance(value, (tuple, list)) and all(isinstance(v, (int, float)) for v in value):
            out[key] = list(value)
    if isinstance(optimizer, Optimizer):
        for key, value in optimizer.extras().items():
            out[key] = str(value).replace("torch.", "") if isinstance(value, torch.dtype) else value
            if isinstance(out[key], float) and math.isinf(out[key]):
                out[key] = "inf"
    return out


__all__ = ["LAMB", "SGD", "Adam", "AdamW", "Optimizer", "RMSprop"]


def _native_class(optimizer: torch.optim.Optimizer) -> type:
    """The optimizer class PopTorch would map ``optimizer`` to: the first class in its MRO that
    PopTorch or PyTorch defines (a user subclass's own Python code is never run on the IPU)."""
    for cls in type(optimizer).__mro__:
        if cls.__module__ == __name__ or cls.__module__.startswith("torch.optim"):
            return cls
    return type(optimizer)


def warn_if_subclassed(optimizer: torch.optim.Optimizer) -> None:
    """PopTorch's warning for an optimizer subclassed from a PopTorch or PyTorch one."""
    if _native_class(optimizer) is type(optimizer):
        return  # PopTorch's or PyTorch's own class (torch's AdamW derives from Adam nowadays)
    bases = type(optimizer).__bases__
    if torch.optim.Optimizer not in bases and Optimizer not in bases:
        from popviz.emulator import log

        log.warn(f"Optimizer `{type(optimizer).__name__}` subclassed from classes in poptorch.optim or "
                 "torch.optim are unlikely to behave as intended. Poptorch does not run Python optimizer "
                 "code directly; but instead uses IPU native optimisers implemented in PopART (the "
                 f"emulator runs {_native_class(optimizer).__name__}.step, not the subclass's).")


STATE_TYPE_ATTRS = ("accum_type", "velocity_accum_type", "first_order_momentum_accum_type",
                    "second_order_momentum_accum_type")


def _float32_state(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer keeps any state in float32 (PopTorch's default accumulator type)."""
    return any(getattr(optimizer, name, None) == torch.float32 for name in STATE_TYPE_ATTRS)


def native_step(optimizer: torch.optim.Optimizer) -> None:
    """One step of the native optimizer ``optimizer`` maps to (not a subclass's override).

    float16 weights with float32 optimizer state (``accum_type`` and the momentum types default
    to float32 in PopTorch): PopART's updaters compute in the state's type and cast only the
    new weight to float16. The step here does the same, on float32 copies of the float16
    weights and gradients, so the state stays float32 and a zero gradient gives a zero update
    (in float16 Adam's ``eps=1e-8`` underflows to 0 and 0/0 would make the weight NaN)."""
    step = _native_class(optimizer).step
    if not _float32_state(optimizer):
        step(optimizer)
        return
    halves = [p for group in optimizer.param_groups for p in group["params"]
              if p.dtype == torch.float16 and p.grad is not None]
    if not halves:
        step(optimizer)
        return
    saved = [(p.data, p.grad) for p in halves]
    for p in halves:
        p.data = p.data.float()
        p.grad = p.grad.float()
    try:
        step(optimizer)
    finally:
        for p, (data, grad) in zip(halves, saved, strict=True):
            data.copy_(p.data)
            p.data, p.grad = data, grad
