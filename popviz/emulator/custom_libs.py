"""Custom-op libraries that cannot be built here, answered as if they had been.

Graphcore's applications build their custom ops with ``make`` against the Poplar SDK's headers
(``custom_ops.so``, ``ema/build/exp_avg_custom_op.so``, ...) and stop before their first PopTorch
call when the library is not there: ``assert os.path.exists(so)``, ``Path(so).is_file()``,
``ctypes.cdll.LoadLibrary(so)`` (speech/conformer, vision/swin, vision/dino, vision/mae,
vision/yolo_v4 in graphcore/examples) or ``torch.ops.load_library(so)`` (the PopTorch custom-op
tutorial). Without the SDK nobody can run ``make``; the library's C++ would not run on the CPU
anyway. So in an emulated process (the ``poptorch`` shim calls :func:`install`):

- ``os.path.exists`` / ``os.path.isfile`` / ``pathlib.Path.exists`` / ``Path.is_file``, called
  by the script's own code, answer True for a missing ``*.so`` file;
- ``ctypes.CDLL`` (hence ``ctypes.cdll.LoadLibrary``) and ``torch.ops.load_library``, called by
  the script's own code for a ``*.so`` that is missing or that needs the SDK's libraries
  (``libpopart.so: cannot open shared object file``), return a library object with no symbols
  instead of raising ``OSError``;
- each such library gets one line on stderr saying so. Nothing is written anywhere.

"The script's own code" is the first caller outside the standard library, installed packages
(site-packages) and popviz: a library probing for a system library (torch looking for CUDA) is
never answered. The library's ops then run through :mod:`popviz.emulator.custom_cpu` (the CPU
implementations of the ops Graphcore's applications use, else the documented fallback).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import re
import site
import sys
import sysconfig
from typing import Any

from popviz.emulator.progress import line

SDK_LIBRARY = re.compile(r"\b(?:lib)?(?:popart|poplar|poputil|popops|poplin|popnn|poprand|popfloat|popsparse"
                         r"|poprithms|popef|poptorch|gcl|gcda|snap|pva)\w*\.so", re.IGNORECASE)
"""A dynamic loader's error naming one of the Poplar SDK's libraries: the library was built
against the SDK, which is not installed here."""

_answered: set[str] = set()
_installed = False
_originals: dict[str, Any] = {}


def _library_dirs() -> tuple[str, ...]:
    """The standard library, every installed-packages directory on the path (a venv's and the
    base interpreter's it may see) and popviz itself."""
    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    with contextlib.suppress(AttributeError):
        dirs.update(os.path.realpath(p) for p in site.getsitepackages())
    dirs.update(os.path.realpath(p) for p in sys.path
                if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages"))
    dirs.add(os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # popviz
    return tuple(d + os.sep for d in dirs)


_LIBRARY_DIRS: tuple[str, ...] = ()
_PASS_THROUGH = (os.sep + "ctypes" + os.sep, os.sep + "torch" + os.sep + "_ops.py", os.sep + "pathlib.py",
                 os.sep + "genericpath.py", os.sep + "posixpath.py")
"""Frames between the script and the call answered here (ctypes' loader, ``torch.ops``)."""


def _from_script(depth: int = 2) -> bool:
    """Whether the call being answered comes from the script's own code (see the module
    docstring): the first frame outside the loaders above decides."""
    global _LIBRARY_DIRS
    if not _LIBRARY_DIRS:
        _LIBRARY_DIRS = _library_dirs()
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<"):
            if name in ("<string>", "<stdin>"):  # python -c, python - < script
                return True
            frame = frame.f_back  # <frozen importlib...>
            continue
        path = os.path.realpath(name)
        if any(p in path for p in _PASS_THROUGH) and path.startswith(_LIBRARY_DIRS):
            frame = frame.f_back
            continue
        return not path.startswith(_LIBRARY_DIRS)
    return False


def _is_library_name(path: Any) -> bool:
    try:
        text = os.fspath(path)
    except TypeError:
        return False
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return text.endswith(".so")


def answer(path: Any, why: str) -> None:
    """Record the library ``path`` as answered; the first time, say so on stderr."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    key = os.path.normpath(os.path.abspath(text))
    if key in _answered:
        return
    _answered.add(key)
    line(f"custom-op library {text} {why}: answered as if built (no Poplar SDK to build it "
         "here); its custom ops run on popviz's CPU implementations or as zeros shaped like "
         "their example outputs (docs/emulator.md, custom ops)")


def answered() -> list[str]:
    """The libraries answered so far (absolute paths)."""
    return sorted(_answered)


class EmulatedLibrary(ctypes.CDLL):
    """What ``ctypes.CDLL`` returns for an answered library: it has no symbols."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"{self._name}: symbol {name!r} is not available: the library was not built "
                             "(answered by popviz's emulator)")

    def __getitem__(self, name_or_ordinal: Any) -> Any:
        raise AttributeError(f"{self._name}: symbol {name_or_ordinal!r} is not available: the library was "
                             "not built (answered by popviz's emulator)")

    def __repr__(self) -> str:
        return f"<popviz emulated library '{self._name}'>"


def _missing_or_sdk(name: Any, error: OSError | None) -> str | None:
    """Why a load is answered (``"is not built"``, ``"needs the Poplar SDK"``), or None."""
    if name is None or not _is_library_name(name):
        return None
    text = os.fspath(name)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if os.sep in text and not _originals["exists"](text):
        return "is not built"
    if error is not None:
        message = str(error)
        if os.sep not in text and "cannot open shared object file" in message and text in message:
            return "is not built"
        if SDK_LIBRARY.search(message.replace(text, "")) or ("undefined symbol: _ZN" in message and (
                "popart" in message or "poplar" in message)):
            return "needs the Poplar SDK"
    return None


def _cdll_init(self: ctypes.CDLL, name: Any, *args: Any, **kwargs: Any) -> None:
    try:
        _originals["cdll_init"](self, name, *args, **kwargs)
    except OSError as exc:
        why = _missing_or_sdk(name, exc)
        if why is None or not _from_script():
            raise
        answer(name, why)
        self._name = os.fspath(name) if not isinstance(os.fspath(name), bytes) else os.fsdecode(name)
        self._handle = 0
        self.__class__ = EmulatedLibrary


def _path_check(original: Any) -> Any:
    def check(path: Any) -> bool:
        if original(path):
            return True
        if _is_library_name(path) and _from_script():
            answer(path, "is not built")
            return True
        return False

    check.__wrapped__ = original  # type: ignore[attr-defined]
    check.__doc__ = original.__doc__
    check.__name__ = original.__name__
    return check


def _path_method(original: Any) -> Any:
    def method(self: pathlib.Path, *args: Any, **kwargs: Any) -> bool:
        if original(self, *args, **kwargs):
            return True
        if _is_library_name(self) and _from_script():
            answer(self, "is not built")
            return True
        return False

    method.__wrapped__ = original  # type: ignore[attr-defined]
    method.__doc__ = original.__doc__
    method.__name__ = original.__name__
    return method


def install() -> None:
    """Answer missing custom-op libraries in this process (once; see the module docstring)."""
    global _installed
    if _installed:
        return
    _installed = True
    _originals.update(exists=os.path.exists, isfile=os.path.isfile, cdll_init=ctypes.CDLL.__init__,
                      path_exists=pathlib.Path.exists, path_is_file=pathlib.Path.is_file)
    os.path.exists = _path_check(_originals["exists"])
    os.path.isfile = _path_check(_originals["isfile"])
    pathlib.Path.exists = _path_method(_originals["path_exists"])  # type: ignore[method-assign]
    pathlib.Path.is_file = _path_method(_originals["path_is_file"])  # type: ignore[method-assign]
    ctypes.CDLL.__init__ = _cdll_init  # type: ignore[method-assign]


def uninstall() -> None:
    """Put back what :func:`install` replaced (tests)."""
    global _installed
    if not _installed:
        return
    os.path.exists, os.path.isfile = _originals["exists"], _originals["isfile"]
    pathlib.Path.exists = _originals["path_exists"]  # type: ignore[method-assign]
    pathlib.Path.is_file = _originals["path_is_file"]  # type: ignore[method-assign]
    ctypes.CDLL.__init__ = _originals["cdll_init"]  # type: ignore[method-assign]
    _installed = False
    _answered.clear()


__all__ = ["EmulatedLibrary", "answer", "answered", "install", "uninstall"]
