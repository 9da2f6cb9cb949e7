"""A tiny stand-in for torchvision, for running Graphcore's example scripts offline in tests:
datasets of seeded random tensors with the real datasets' shapes and classes (no download),
the transforms those scripts use, and small real networks under the model names they ask for.
Put ``tests/fake_torchvision`` on ``PYTHONPATH`` to use it."""

from torchvision import datasets, models, transforms  # noqa: F401

__version__ = "0.0.0+popviz.tests.fake"
