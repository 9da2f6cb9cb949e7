"""How one executor call's arguments become micro-batches, and how its outputs come back.

PopTorch passes every parameter of ``forward`` in order (positionally, by name or its default);
one call holds D·G·R micro-batches along dim 0; the inputs of later calls must match the compiled
ones; outputs are combined per output mode (All, EveryN, Final, Sum). :class:`Batching` is the
part of :class:`~popviz.emulator.executor.PoplarExecutor` that does this (a mixin: it reads the
executor's options, model and compiled inputs).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from popviz.emulator.enums import OutputMode
from popviz.emulator.errors import Error

INPUTS_MISMATCH_END = (
    "\nThis error occurred because the inputs passed at runtime don't match the inputs used to "
    "compile the model.\nTo recompile the model for the new inputs create a new inferenceModel / "
    "trainingModel wrapper or call destroy() on the curent one and try again.")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Outputs:
    """Collects micro-batch outputs and combines them per output mode."""

    def __init__(self, mode: OutputMode, period: int, d: int, g: int, r: int) -> None:
        self.mode, self.period, self.g, self.r = mode, period, g, r
        self.last_d = d - 1
        self.kept: list[list[Any]] = []
        self.sums: dict[int, list[Any]] = {}
        self.spec = None

    def add(self, iteration: int, step: int, replica: int, out: Any) -> None:
        leaves, spec = tree_flatten(out)
        self.spec = spec
        leaves = [t.detach() if isinstance(t, torch.Tensor) else t for t in leaves]
        if self.mode == OutputMode.All:
            self.kept.append(leaves)
        elif self.mode == OutputMode.EveryN:
            if (iteration + 1) % self.period == 0:
                self.kept.append(leaves)
        elif self.mode == OutputMode.Final:
            if iteration == self.last_d and step == self.g - 1:
                self.kept.append(leaves)
        else:  # Sum over device iterations and accumulation steps, per replica
            current = self.sums.get(replica)
            self.sums[replica] = leaves if current is None else [
                a + b if isinstance(a, torch.Tensor) else b for a, b in zip(current, leaves, strict=True)]

    def result(self) -> Any:
        groups = self.kept if self.mode != OutputMode.Sum else [self.sums[r] for r in sorted(self.sums)]
        if self.spec is None:
            return None
        if not groups:  # EveryN with fewer device iterations than its period: nothing returned
            return None
        combined = []
        for i in range(len(groups[0])):
            parts = [grp[i] for grp in groups]
            if not isinstance(parts[0], torch.Tensor):
                combined.append(parts[-1])
            elif parts[0].dim() == 0:
                combined.append(parts[0] if len(parts) == 1 else torch.stack(parts))
            else:
                combined.append(parts[0] if len(parts) == 1 else torch.cat(parts, dim=0))
        return tree_unflatten(combined, self.spec)


def no_backward() -> None:
    raise Error("backward() cannot be called explicitly on outputs of a PopTorch model. If you're using "
                "a trainingModel, the backwards pass is performed automatically when invoking the "
                "model. If you're using an inferenceModel, you should use a trainingModel instead.")


class Batching:
    """Argument handling of :class:`~popviz.emulator.executor.PoplarExecutor`."""

    @staticmethod
    def _forward_arg_names(model: Any) -> list[str]:
        try:
            params = inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model).parameters
        except (TypeError, ValueError):
            return []
        return [p.name for p in params.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    @staticmethod
    def _signature(model: Any) -> inspect.Signature | None:
        try:
            return inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model)
        except (TypeError, ValueError):
            return None

    def _canonical(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's arguments as PopTorch passes them to the model: every parameter of
        ``forward`` in order (given positionally, by name, or its default), so ``m(x, mask=y)``
        and ``m(x, y)`` are the same call; only ``**kwargs`` and what follows ``*args`` stay named."""
        sig = self.__dict__.get("_sig_cache", False)
        if sig is False:
            sig = self._signature(self._model)
            self.__dict__["_sig_cache"] = sig
        if sig is None:
            return args, kwargs
        params = list(sig.parameters.values())
        variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
        names = [p.name for p in params]
        assert variadic or len(args) + len(kwargs) <= len(params), (
            f"Too many arguments provided: expected {names} ({len(names)}) but got {len(args) + len(kwargs)}")
        if not variadic:
            for k in kwargs:
                assert k in names, f"{k} is not a valid parameter.Allowed values are {names}"
        out_args: list[Any] = []
        out_kwargs: dict[str, Any] = {}
        after_star = False
        rest = list(args)
        for i, p in enumerate(params):
            if p.kind == p.VAR_KEYWORD:
                out_kwargs.update({k: v for k, v in kwargs.items() if k not in names[:i]})
            elif p.kind == p.VAR_POSITIONAL:
                out_args.extend(rest[i:] if i < len(rest) else [])
                rest = []
                after_star = True
            elif i < len(rest):
                assert p.name not in kwargs, f"Parameter {p.name} was passed more than once"
                out_args.append(rest[i])
            else:
                if p.name in kwargs:
                    value = kwargs[p.name]
                elif p.default is not p.empty:
                    value = p.default
                else:
                    raise Error(f"Mandatory parameter {p.name} missing")
                if after_star or p.kind == p.KEYWORD_ONLY:
                    out_kwargs[p.name] = value
                else:
                    out_args.append(value)
        return tuple(out_args), out_kwargs

    @property
    def _batches_per_call(self) -> int:
        o = self._options
        return o.device_iterations * (o.replication_factor // o.input_group_size) * \
            (o.Training.gradient_accumulation if self._training else 1)

    def _split(self, args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
        """The micro-batches of one call's arguments."""
        n = self._batches_per_call
        o = self._options
        leaves, spec = tree_flatten((args, kwargs))
        for t in leaves:
            if isinstance(t, torch.Tensor):
                b = 1 if t.dim() == 0 else t.shape[0]
                assert b % n == 0, (
                    f"Invalid batch dimension: In the input {t.shape}, the batch dimension ({b}) must be a "
                    f"multiple of Options.deviceIterations({o.device_iterations}) * "
                    f"(Options.replicationFactor({o.replication_factor}) / "
                    f"Options.inputReplicaGrouping.input_group_size({o.input_group_size})) * "
                    f"Options.Training.gradientAccumulation({o.Training.gradient_accumulation}) = {n} "
                    "because it is used to calculate the batch size which will be executed on the device in "
                    "any given iteration. For a full explanation see the batching semantics page of the "
                    "documentation.")
        micro = []
        for i in range(n):
            parts = []
            for t in leaves:
                if isinstance(t, torch.Tensor) and t.dim() > 0:
                    m = t.shape[0] // n
                    parts.append(t[i * m:(i + 1) * m])
                else:
                    parts.append(t)
            micro.append(tree_unflatten(parts, spec))
        return micro

    def _names(self, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
        """(name, value) of every argument leaf, named after forward's parameters."""
        out = []
        for i, value in enumerate(args):
            name = self._arg_names[i] if i < len(self._arg_names) else f"input{i}"
            out.extend(self._leaf_names(name, value))
        for name, value in kwargs.items():
            out.extend(self._leaf_names(name, value))
        return out

    @staticmethod
    def _leaf_names(name: str, value: Any) -> list[tuple[str, Any]]:
        leaves, _ = tree_flatten(value)
        if len(leaves) == 1 and leaves[0] is value:
            return [(name, value)]
        return [(f"{name}[{i}]", leaf) for i, leaf in enumerate(leaves)]

    def _validate(self, args: tuple, kwargs: dict) -> None:
        count, compiled_args, compiled_kwargs = self._compiled_inputs
        if len(args) != count:
            raise Error(f"Number of positional arguments mismatch: expected {count} arguments "
                        f"but got {len(args)}.{INPUTS_MISMATCH_END}")
        now = dict(self._names(args, kwargs))
        for name, (shape, dtype) in {**compiled_args, **compiled_kwargs}.items():
            value = now.get(name)
            if shape is None:
                continue
            if not isinstance(value, torch.Tensor):
                raise Error(f"Type mismatch for {name}: expected {torch.Tensor} but got {type(value)}."
                            f"{INPUTS_MISMATCH_END}")
            if value.dtype != dtype:
                raise Error(f"Data type mismatch for {name}: expected {dtype} but got {value.dtype}."
                            f"{INPUTS_MISMATCH_END}")
            if tuple(value.shape) != shape:
                raise Error(f"Shape mismatch for {name}: expected {torch.Size(shape)} but got {value.shape}."
                            f"{INPUTS_MISMATCH_END}")

    def _remember_inputs(self, args: tuple, kwargs: dict) -> None:
        def shape(v: Any) -> tuple:
            return (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else (None, None)

        positional = {}
        for i, value in enumerate(args):
            name = self._arg_names[i] if i < len(self._arg_names) else f"input{i}"
            positional.update({n: shape(v) for n, v in self._leaf_names(name, value)})
        named = {n: shape(v) for k, value in kwargs.items() for n, v in self._leaf_names(k, value)}
        self._compiled_inputs = (len(args), positional, named)
