"""``popdist`` as seen by a script run under ``popviz emulate``: the emulator's stand-in."""

import sys as _sys

from popviz.emulator import popdist_poptorch as poptorch
from popviz.emulator.popdist import *  # noqa: F403
from popviz.emulator.popdist import __all__  # noqa: F401

_sys.modules[__name__ + ".poptorch"] = poptorch
