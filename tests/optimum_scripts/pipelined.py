"""optimum-graphcore without its trainer: ``to_pipelined(model, ipu_config).parallelize().half()``
then ``poptorch.trainingModel(model, ipu_config.to_options(), optimizer)`` (optimum's documented
path), a tiny random-weight BERT for sequence classification on 4 IPUs, synthetic batches.

Used by tests/test_optimum.py under ``popviz capture --emulate --calls 1``."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import poptorch
import torch
import transformers
from optimum.graphcore import IPUConfig
from optimum.graphcore.modeling_utils import to_pipelined

G, D, SEQ = 16, 2, 16
torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=64, num_labels=2)
model = transformers.BertForSequenceClassification(config)
ipu_config = IPUConfig(layers_per_ipu=[1, 1, 1, 1], ipus_per_replica=4, gradient_accumulation_steps=G,
                       device_iterations=D, executable_cache_dir="disabled")
model = to_pipelined(model, ipu_config).parallelize().half()
model.train()
optimizer = poptorch.optim.AdamW(model.parameters(), lr=1e-4, first_order_momentum_accum_type=torch.float16,
                                 second_order_momentum_accum_type=torch.float32)
training = poptorch.trainingModel(model, ipu_config.to_options(), optimizer)
n = G * D
ids = torch.randint(0, 128, (n, SEQ))
for _ in range(2):
    out = training(input_ids=ids, attention_mask=torch.ones(n, SEQ, dtype=torch.long),
                   token_type_ids=torch.zeros(n, SEQ, dtype=torch.long), labels=torch.randint(0, 2, (n,)))
    print("loss", float(out[0]))
