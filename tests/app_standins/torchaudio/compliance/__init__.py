"""Stand-in: ``torchaudio.compliance.kaldi`` (see ../__init__.py)."""

from torchaudio.compliance import kaldi  # noqa: F401
