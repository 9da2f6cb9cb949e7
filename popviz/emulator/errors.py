"""PopTorch's exception types (``poptorch.Error`` and its two subclasses).

In PopTorch these come from the compiled ``poptorch.poptorch_core`` module; the emulator offers
them both as ``poptorch.Error`` and ``poptorch.poptorch_core.Error``. ``str(error)`` reads
``'<type>': <message>`` as in PopTorch, and the parts are attributes.
"""

from __future__ import annotations

PY_ERROR = "poptorch_py_error"
"""The ``type`` PopTorch gives errors raised by its Python layer."""
CPP_ERROR = "poptorch_cpp_error"
"""The ``type`` the emulator gives errors PopTorch raises while compiling (in C++)."""


class Error(Exception):
    """Base class of PopTorch's errors: ``type``, ``message`` and ``location`` attributes."""

    def __init__(self, message: str = "", type: str = PY_ERROR, location: str = "") -> None:
        super().__init__(f"'{type}': {message}")
        self.type = type
        self.message = message
        self.location = location

    def __reduce__(self) -> tuple:
        # pickled by name through this module: ``poptorch.poptorch_core`` (their __module__, below)
        # is importable only where the emulator's shim is on the path
        return _restore, (type(self).__name__, self.message, self.type, self.location)


class RecoverableError(Error):
    """An error after which the application can recover (``recovery_action`` says how)."""

    recovery_action: str = ""


class UnrecoverableError(Error):
    """An error after which the device (and so the process) cannot be used again."""


def _restore(name: str, message: str, type: str, location: str) -> Error:
    return {"Error": Error, "RecoverableError": RecoverableError, "UnrecoverableError": UnrecoverableError}[name](
        message, type, location)


# A traceback names them as PopTorch's do (``poptorch.poptorch_core.Error: 'popart_exception': ...``),
# which is where the emulator's shim also offers them.
for _cls in (Error, RecoverableError, UnrecoverableError):
    _cls.__module__ = "poptorch.poptorch_core"

__all__ = ["Error", "RecoverableError", "UnrecoverableError"]
