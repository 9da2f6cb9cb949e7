"""``popart`` as seen by a script run under ``popviz emulate``: PopART's enums (popviz's stand-in).

A real PopART installed on the interpreter's path is never shadowed: when one is found beyond
this shim directory it is loaded instead, under the same name.
"""

import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys

_SHIM_DIR = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))


def _real_popart_spec():
    others = [p for p in _sys.path if _os.path.abspath(p or _os.getcwd()) != _SHIM_DIR]
    return _machinery.PathFinder.find_spec("popart", others)


_spec = _real_popart_spec()
if _spec is not None and _spec.loader is not None:
    _module = _util.module_from_spec(_spec)
    _sys.modules[__name__] = _module
    _spec.loader.exec_module(_module)
else:
    import _popviz_home

    _popviz_home.ensure()
    from popviz.emulator.popart_enums import *  # noqa: F403
    from popviz.emulator.popart_enums import __all__, __version__  # noqa: F401
