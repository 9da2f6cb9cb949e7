"""B9 (and B1): the efficient-data-loading tutorial's CNN, one IPU, synthetic data.

graphcore/tutorials tutorials/pytorch/efficient_data_loading: micro-batch 16 of 1x128x128
float32, SGD(lr 0.001, momentum 0.9), deviceIterations(50), replication 1, no gradient
accumulation, enableSyntheticData(True).
"""

import sys

import poptorch
import torch
from _common import batch, train_one_call
from models import ClassificationModel

REPLICAS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
MB, D = 16, 50
opts = poptorch.Options().deviceIterations(D).replicationFactor(REPLICAS).enableSyntheticData(True)
model = ClassificationModel()
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9, use_combined_accum=False)
total = MB * D * REPLICAS
train_one_call(model, opts, optimizer, batch(1, 128, 128, total=total), batch(total=total, dtype=torch.int64, high=10))
