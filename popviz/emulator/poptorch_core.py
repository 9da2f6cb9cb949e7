"""Stand-in for PopTorch's compiled ``poptorch_core`` module: its exception types."""

from popviz.emulator.errors import Error, RecoverableError, UnrecoverableError

__all__ = ["Error", "RecoverableError", "UnrecoverableError"]
