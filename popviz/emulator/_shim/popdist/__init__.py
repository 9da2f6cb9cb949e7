"""``popdist`` as seen by a script run under ``popviz emulate``: the emulator's stand-in."""

import sys as _sys

import _popviz_home

_popviz_home.ensure()

from popviz.emulator import popdist_poptorch as poptorch  # noqa: E402
from popviz.emulator.popdist import *  # noqa: E402, F403
from popviz.emulator.popdist import __all__  # noqa: E402, F401

_sys.modules[__name__ + ".poptorch"] = poptorch
