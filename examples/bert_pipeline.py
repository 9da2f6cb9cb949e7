#!/usr/bin/env python3
"""Fine-tune a BERT-style encoder pipelined over four IPUs, the way Graphcore's BERT examples split it.

The embeddings sit on IPU 0 with the first encoder layers; each IPU then takes a run of layers
(`--layers-per-ipu`, as optimum-graphcore's `IPUConfig(layers_per_ipu=[...])`), marked with
`poptorch.BeginBlock(layer, ipu_id=...)`. The default split is the naive even one (3 layers per
IPU for 12 layers), which makes IPU 0 both the fullest and the slowest: it also holds the
embeddings. The data are random token ids, so nothing is downloaded.

    python examples/bert_pipeline.py                              # with PopTorch, on 4 IPUs
    popviz capture -o runs/even --emulate -- python examples/bert_pipeline.py
    popviz capture -o runs/planned --emulate -- python examples/bert_pipeline.py --layers-per-ipu 2,3,3,4
    popviz compare runs/even runs/planned
"""

from __future__ import annotations

import argparse

import poptorch
import torch
from torch import nn


class Embeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, seq: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        return self.norm(self.word(input_ids) + self.position(positions))


class Encoder(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.embeddings = Embeddings(args.vocab, args.hidden, args.seq)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(args.hidden, args.heads, 4 * args.hidden, dropout=0.0, batch_first=True)
            for _ in range(args.layers))
        self.classifier = nn.Linear(args.hidden, args.classes)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.classifier(x[:, 0])
        if labels is None:
            return logits
        return logits, self.loss(logits, labels)


def split(model: Encoder, layers_per_ipu: list[int]) -> None:
    """Place the layers on IPUs the way Graphcore's examples do: BeginBlock at the first layer of
    each IPU's run; the embeddings go with the first run, the classifier with the last."""
    if sum(layers_per_ipu) != len(model.layers):
        raise SystemExit(f"--layers-per-ipu {layers_per_ipu} covers {sum(layers_per_ipu)} layers; "
                         f"the model has {len(model.layers)}")
    model.embeddings = poptorch.BeginBlock(model.embeddings, "embeddings", ipu_id=0)
    first = 0
    for ipu, count in enumerate(layers_per_ipu):
        if count:
            model.layers[first] = poptorch.BeginBlock(model.layers[first], f"layers{first}", ipu_id=ipu)
        first += count
    last = max(i for i, c in enumerate(layers_per_ipu) if c)
    model.classifier = poptorch.BeginBlock(model.classifier, "classifier", ipu_id=last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--layers-per-ipu", default=None,
                        help="comma-separated layers per IPU (default: the even split over 4 IPUs)")
    parser.add_argument("--batch-size", type=int, default=4, help="micro-batch size (default 4)")
    parser.add_argument("--gradient-accumulation", type=int, default=16)
    parser.add_argument("--device-iterations", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2, help="training steps (executor calls)")
    args = parser.parse_args()
    torch.manual_seed(0)

    if args.layers_per_ipu:
        layers_per_ipu = [int(n) for n in args.layers_per_ipu.split(",")]
    else:
        layers_per_ipu = [args.layers // 4 + (1 if i < args.layers % 4 else 0) for i in range(4)]
    model = Encoder(args)
    split(model, layers_per_ipu)

    opts = poptorch.Options().deviceIterations(args.device_iterations)
    opts.Training.gradientAccumulation(args.gradient_accumulation)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
    optimizer = poptorch.optim.AdamW(model.parameters(), lr=1e-4)
    training = poptorch.trainingModel(model, opts, optimizer=optimizer)
    per_call = args.batch_size * args.gradient_accumulation * args.device_iterations
    for step in range(1, args.steps + 1):
        input_ids = torch.randint(0, args.vocab, (per_call, args.seq))
        labels = torch.randint(0, args.classes, (per_call,))
        _, loss = training(input_ids, labels)
        print(f"step {step}/{args.steps}: loss {loss.mean().item():.4f}", flush=True)
    training.detachFromDevice()


if __name__ == "__main__":
    main()
