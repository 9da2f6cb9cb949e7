"""Mixed float16 / float32 operands, as PopTorch treats them: an operation given both is computed
in float32 (the float16 operands are upcast), so ``model.half()`` fed float32 inputs runs instead
of failing with PyTorch's dtype mismatch. In-place operations and conversions keep PyTorch's own
rules (the tensor written keeps its dtype)."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_KEEP = {"to", "type", "type_as", "copy_", "__setitem__", "__getitem__", "__get__", "__set__",
         "float", "half", "double", "bfloat16", "view_as", "expand_as", "reshape_as", "new_tensor",
         "new_zeros", "new_ones", "new_full", "new_empty"}
"""Functions given mixed dtypes on purpose (conversions, indexing, assignment)."""


def _mixed(leaves: list[Any]) -> bool:
    half = single = False
    for t in leaves:
        if isinstance(t, torch.Tensor):
            if t.dtype == torch.float16:
                half = True
            elif t.dtype == torch.float32:
                single = True
    return half and single


def _up(value: Any) -> Any:
    return value.float() if isinstance(value, torch.Tensor) and value.dtype == torch.float16 else value


class UpcastMixed(TorchFunctionMode):
    """While active: operations with float16 and float32 tensor operands run in float32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in _KEEP and not name.endswith("_") and _mixed(tree_flatten((args, kwargs))[0]):
            args, kwargs = tree_map(_up, (args, kwargs))
        return func(*args, **kwargs)


def upcasting() -> UpcastMixed:
    return UpcastMixed()


__all__ = ["UpcastMixed", "upcasting"]
