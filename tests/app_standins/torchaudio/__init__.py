"""Stand-in for torchaudio (see ../README.md): PyPI has no torchaudio build for torch 2.13.
speech/conformer imports it at the top of its data pipeline; with ``use_generated_data`` no
audio is read, and here every audio function raises."""

from torchaudio import compliance  # noqa: F401


def _no_audio(*args, **kwargs):
    raise RuntimeError("torchaudio stand-in (popviz tests): no audio I/O; run with generated data")


load = info = _no_audio


class _Namespace:
    def __getattr__(self, name):
        return _no_audio


backend = _Namespace()
backend.sox_io_backend = _Namespace()
transforms = _Namespace()
sox_effects = _Namespace()
