#!/usr/bin/env python3
"""Train a BERT-base-wide encoder on two IPUs with a split that does not fit: compilation fails.

The model is BERT-base wide (hidden 768, 12 heads) with 8 layers and a 30,522-token vocabulary:
about 81 million parameters. Trained in float32 with AdamW and gradient accumulation, each
parameter costs 16 bytes on chip (the weight, two optimizer moments, one accumulator), so the
default split, the embeddings and the first 6 layers on IPU 0 and the last 2 on IPU 1, asks IPU 0
for more than its 900 MB of In-Processor-Memory. Poplar then refuses to compile: PopTorch raises
``poptorch.Error`` ("Out of memory ...") on the first call and, with profiling on, leaves a
memory-only report (no execution) to look at. ``--layers-on-ipu0 3`` is a split that fits. The
data are random token ids, so nothing is downloaded.

    python examples/oom_model.py                                   # with PopTorch, on 2 IPUs
    popviz capture -o runs/oom --emulate -- python examples/oom_model.py
    popviz analyse runs/oom
"""

from __future__ import annotations

import argparse

import poptorch
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.layers_on_ipu0 = args.layers_on_ipu0
        self.word = nn.Embedding(args.vocab, args.hidden)
        self.position = nn.Embedding(args.seq, args.hidden)
        self.norm = nn.LayerNorm(args.hidden)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(args.hidden, args.heads, 4 * args.hidden, dropout=0.0, batch_first=True)
            for _ in range(args.layers))
        self.head = nn.Linear(args.hidden, args.classes)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor):
        with poptorch.Block("embeddings", ipu_id=0):
            positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
            x = self.norm(self.word(input_ids) + self.position(positions))
        for i, layer in enumerate(self.layers):
            with poptorch.Block(f"layer{i}", ipu_id=0 if i < self.layers_on_ipu0 else 1):
                x = layer(x)
        with poptorch.Block("head", ipu_id=1):
            logits = self.head(x[:, 0])
            return logits, self.loss(logits, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--layers-on-ipu0", type=int, default=6,
                        help="encoder layers on IPU 0 with the embeddings; the rest go to IPU 1 (default 6)")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=2, help="micro-batch size (default 2)")
    parser.add_argument("--gradient-accumulation", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="training steps (executor calls)")
    args = parser.parse_args()
    torch.manual_seed(0)

    model = Classifier(args)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(args.gradient_accumulation)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
    optimizer = poptorch.optim.AdamW(model.parameters(), lr=1e-4)
    training = poptorch.trainingModel(model, opts, optimizer=optimizer)
    per_call = args.batch_size * args.gradient_accumulation
    for step in range(1, args.steps + 1):
        input_ids = torch.randint(0, args.vocab, (per_call, args.seq))
        labels = torch.randint(0, args.classes, (per_call,))
        _, loss = training(input_ids, labels)  # the first call compiles: poptorch.Error if it does not fit
        print(f"step {step}/{args.steps}: loss {loss.mean().item():.4f}", flush=True)


if __name__ == "__main__":
    main()
