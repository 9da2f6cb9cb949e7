"""``ICustomArgParser`` / ``registerCustomArgParser``: user types among a model's inputs and
outputs. A registered type is taken apart into its tensors (``yieldTensors``) and rebuilt
(``reconstruct``) wherever the emulator splits a call into micro-batches or combines outputs,
as PopTorch does; instances of subclasses use their base class's parser."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from popviz.emulator.errors import Error

_parsers: dict[type, ICustomArgParser] = {}


class ICustomArgParser(abc.ABC):
    """How to take a user type apart into tensors and put it back together."""

    @abc.abstractmethod
    def yieldTensors(self, struct: Any) -> Iterator[torch.Tensor]:
        """The tensors of ``struct``, in a fixed order."""

    @abc.abstractmethod
    def reconstruct(self, original_structure: Any, tensor_iterator: Iterator[torch.Tensor]) -> Any:
        """A new structure like ``original_structure`` holding the tensors from the iterator."""


def _parser_of(obj: Any) -> ICustomArgParser:
    parser = _parsers.get(type(obj))
    if parser is None:
        parser = next(p for t, p in _parsers.items() if isinstance(obj, t))
    return parser


def _flatten(obj: Any) -> tuple[list[Any], Any]:
    return list(_parser_of(obj).yieldTensors(obj)), obj


def _unflatten(values: Any, original: Any) -> Any:
    return _parser_of(original).reconstruct(original, iter(list(values)))


def registerCustomArgParser(arg_data_type: type, arg_parser: ICustomArgParser | None) -> None:
    """Use ``arg_parser`` for inputs and outputs of type ``arg_data_type`` (None: stop)."""
    if not isinstance(arg_data_type, type):
        raise Error("registerCustomArgParser: arg_data_type must be a type")
    if arg_parser is None:
        _parsers.pop(arg_data_type, None)
        return
    if not isinstance(arg_parser, ICustomArgParser):
        raise Error("arg_parser must inherit from ICustomArgParser")
    _parsers[arg_data_type] = arg_parser
    if arg_data_type not in pytree.SUPPORTED_NODES:
        pytree.register_pytree_node(arg_data_type, _flatten, _unflatten)


__all__ = ["ICustomArgParser", "registerCustomArgParser"]
