"""A6: ResNeXt-50 32x4d inference with two available memory proportions (fits, or not).

graphcore/examples ``tutorials/tech_notes_code/available_memory/pytorch_demo.py`` (SDK 3.2):
torchvision's ``resnext50_32x4d`` in eval mode, float32 (the generated images are not halved and
the model is not cast), batch 20, ``deviceIterations(1)``, one IPU, and
``setAvailableMemoryProportion({"IPU0": amp})``. Its tests (``tests/pytorch/test_all.py``)
expect the default, 0.8, to fail with "Out of memory on tile" and 0.35 to run.

    python a6_resnext_inference.py AMP
"""

import sys

import poptorch
import torch
from _common import batch
from models import ResNet50

MB = 20
amp = float(sys.argv[1]) if len(sys.argv) > 1 else 0.8

model = ResNet50(groups=32, width_per_group=4).eval()
opts = poptorch.Options().deviceIterations(1)
opts.setAvailableMemoryProportion({"IPU0": amp})
with torch.no_grad():
    poptorch.inferenceModel(model, opts)(batch(3, 224, 224, total=MB))
