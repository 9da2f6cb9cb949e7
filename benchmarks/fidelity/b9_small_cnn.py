"""B9 (and B1-B8): the efficient-data-loading tutorial's CNN, synthetic data unless told "real".

graphcore/tutorials tutorials/pytorch/efficient_data_loading: micro-batch 16 of 1x128x128
float32, SGD(lr 0.001, momentum 0.9), deviceIterations(50), replication 1 (or the first
argument), no gradient accumulation, enableSyntheticData(True) (or, with a second argument
``real``, the images streamed from the host).
"""

import sys

import poptorch
import torch
from _common import batch, train_one_call
from models import ClassificationModel

REPLICAS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
REAL = len(sys.argv) > 2 and sys.argv[2] == "real"
MB, D = 16, 50
opts = poptorch.Options().deviceIterations(D).replicationFactor(REPLICAS).enableSyntheticData(not REAL)
model = ClassificationModel()
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9, use_combined_accum=False)
total = MB * D * REPLICAS
train_one_call(model, opts, optimizer, batch(1, 128, 128, total=total), batch(total=total, dtype=torch.int64, high=10))
