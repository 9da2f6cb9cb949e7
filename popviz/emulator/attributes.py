"""``poptorch.Attribute``: a context manager that sets PopART attributes on the operations
inside it (optimum-graphcore's ``outline_attribute`` uses ``Attribute(__outline={"layer": ...})``
so PopART outlines identical layers once).

As in PopTorch (``python/options.py``), entering sets each key through
``torch.ops.poptorch.set_attribute(attribute, key, value)`` and leaving restores the previous
values (``clear_attribute`` for keys that had none); nested contexts merge. The values are kept
by :mod:`popviz.emulator.torch_ops`; outlining saves code memory on the IPU and does not change
the emulator's estimate.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch

from popviz.emulator import torch_ops


class Attribute:
    _current_attrs: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, **kwargs: dict[str, Any]) -> None:
        self._kwargs = kwargs
        self._saved: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> None:
        torch_ops.register()
        self._saved = copy.deepcopy(Attribute._current_attrs)
        for attr, dictionary in self._kwargs.items():
            for key, value in dictionary.items():
                torch.ops.poptorch.set_attribute(attr, key, value)
            Attribute._current_attrs.setdefault(attr, {}).update(dictionary)

    def __exit__(self, *exc: object) -> None:
        for attr, dictionary in self._kwargs.items():
            saved = self._saved.get(attr, {})
            for key in dictionary:
                if key not in saved:
                    torch.ops.poptorch.clear_attribute(attr, key)
                else:
                    torch.ops.poptorch.set_attribute(attr, key, saved[key])
        Attribute._current_attrs = self._saved


__all__ = ["Attribute"]
