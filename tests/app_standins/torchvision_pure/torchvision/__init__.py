"""Stand-in that loads the pure-Python parts of a real torchvision wheel (models, transforms,
datasets) without its compiled operators, which PyPI builds only against CUDA torch (see
../../README.md). ``TORCHVISION_WHEEL_DIR`` names a directory holding the real ``torchvision``
package (``pip install --no-deps --target DIR torchvision==0.28.0``). Its compiled-op modules
(``extension``, ``_meta_registrations``, ``_autograd_registrations``) are replaced by empty ones:
``torchvision.ops`` functions then raise, as torchvision does without its extension."""

import os
import sys
import types

_home = os.environ.get("TORCHVISION_WHEEL_DIR")
if not _home or not os.path.isdir(os.path.join(_home, "torchvision")):
    raise ImportError("torchvision stand-in: set TORCHVISION_WHEEL_DIR to a directory holding the real package "
                      "(pip install --no-deps --target DIR torchvision==0.28.0)")
__path__ = [os.path.join(_home, "torchvision")]


def _no_ops() -> None:
    raise RuntimeError("torchvision's compiled operators are not available (popviz tests' stand-in)")


_extension = types.ModuleType(__name__ + ".extension")
_extension._has_ops = lambda: False
_extension._assert_has_ops = _no_ops
_extension._check_cuda_version = lambda: -1
_extension._load_library = lambda name: None
for _name, _module in (("extension", _extension),
                       ("_meta_registrations", types.ModuleType(__name__ + "._meta_registrations")),
                       ("_autograd_registrations", types.ModuleType(__name__ + "._autograd_registrations"))):
    sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module

from torchvision import datasets, models, transforms, utils  # noqa: E402, F401

__version__ = "0.28.0+popviz.standin"
_image_backend = "PIL"


def get_image_backend() -> str:
    return _image_backend


def set_image_backend(backend: str) -> None:
    global _image_backend
    _image_backend = backend
