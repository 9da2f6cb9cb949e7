"""Import the popviz that holds these shims, whatever the script's directory holds.

``python script.py`` puts the script's directory first on ``sys.path``; a ``popviz/`` folder
there (a checkout, a notes folder) would otherwise be imported instead of the installed
package and the emulator would not load. The shims call :func:`ensure` before importing
``popviz.emulator``: it imports ``popviz`` from the directory that contains this shim tree.
"""

import os
import sys

HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
"""The directory holding the ``popviz`` package these shims belong to."""


def ensure() -> None:
    if "popviz" in sys.modules:
        return
    sys.path.insert(0, HOME)
    try:
        import popviz  # noqa: F401
    finally:
        sys.path.remove(HOME)
