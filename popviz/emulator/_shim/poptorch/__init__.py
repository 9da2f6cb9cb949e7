"""``poptorch`` as seen by a script run under ``popviz emulate``: popviz's CPU emulator.

This package exists only on the PYTHONPATH that ``popviz.emulator.launch.emulated_env`` builds.
Submodules (``poptorch.optim``, ``poptorch.poptorch_core``, ...) are the emulator's own modules.
"""

import importlib as _importlib
import sys as _sys

import _popviz_home

try:
    _popviz_home.ensure()
    import popviz.emulator as _emulator
    from popviz.emulator import *  # noqa: F403
    from popviz.emulator import __all__, __version__  # noqa: F401
except ImportError as exc:  # popviz or torch missing in the interpreter running the script
    raise ImportError(
        f"popviz's PopTorch emulator could not be imported ({exc}); install popviz with its "
        f"emulator extra in the Python that runs this script ({_sys.executable}): "
        "pip install 'popviz[emulate]'"
    ) from exc

for _name in _emulator.SUBMODULES:
    _module = _importlib.import_module(f"popviz.emulator.{_name}")
    _sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module

# Custom-op libraries the script cannot build here are answered as built; an estimate's
# DataLoaders are capped and the script's processes end when the emulator stops it.
_importlib.import_module("popviz.emulator.custom_libs").install()
_importlib.import_module("popviz.emulator.workers").install()

# What the emulated run is doing goes to stderr from here on (popviz.emulator.progress).
_importlib.import_module("popviz.emulator.progress").reporter().script_started()
