#!/usr/bin/env python3
"""Fine-tune a BERT-style encoder pipelined over four IPUs, the way Graphcore's BERT examples split it.

The embeddings sit on IPU 0 with the first encoder layers; each IPU then takes a run of layers
(`--layers-per-ipu`, as optimum-graphcore's `IPUConfig(layers_per_ipu=[...])`), marked with
`poptorch.BeginBlock(layer, ipu_id=...)`. The default split is the naive even one (3 layers per
IPU for 12 layers), which makes IPU 0 the fullest: it also holds the embeddings; with `--mlm` it
also runs the tied head, which makes it the slowest too. The data are random token ids, so
nothing is downloaded.

`--mlm` trains a masked-language-model head instead of the classifier, as BERT pre-training does:
its output projection shares the word embeddings' weights (a tied projection), so it runs on
IPU 0 with them, after the last layer; the first `--masked` positions of each sequence are
predicted. A BERT-Large-sized run: `--layers 24 --hidden 1024 --heads 16 --mlm`.

    python examples/bert_pipeline.py --mlm                        # with PopTorch, on 4 IPUs
    popviz capture -o runs/even --emulate -- python examples/bert_pipeline.py --mlm --gradient-accumulation 64
    popviz plan runs/even                                         # proposes layers_per_ipu=[1, 4, 4, 3]
    popviz capture -o runs/planned --emulate -- python examples/bert_pipeline.py --mlm \
        --gradient-accumulation 64 --layers-per-ipu 1,4,4,3
    popviz compare runs/even runs/planned

(sample_reports/bert_even_split and bert_planned are these two runs with `--steps 1`.)
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


class MaskedLMHead(nn.Module):
    """Transform, then project onto the vocabulary with the word embeddings' own weights."""

    def __init__(self, embeddings: Embeddings, hidden: int, masked: int) -> None:
        super().__init__()
        self.masked = masked
        self.transform = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.decoder = nn.Linear(hidden, embeddings.word.num_embeddings)
        self.decoder.weight = embeddings.word.weight  # tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(torch.nn.functional.gelu(self.transform(x[:, :self.masked])))
        return self.decoder(x)


class Encoder(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.embeddings = Embeddings(args.vocab, args.hidden, args.seq)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(args.hidden, args.heads, 4 * args.hidden, dropout=0.0, batch_first=True)
            for _ in range(args.layers))
        if args.mlm:
            self.mlm = MaskedLMHead(self.embeddings, args.hidden, args.masked)
        else:
            self.classifier = nn.Linear(args.hidden, args.classes)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        if hasattr(self, "mlm"):
            logits = self.mlm(x)
            if labels is None:
                return logits
            return logits, self.loss(logits.flatten(0, 1), labels.flatten())
        logits = self.classifier(x[:, 0])
        if labels is None:
            return logits
        return logits, self.loss(logits, labels)


def split(model: Encoder, layers_per_ipu: list[int]) -> None:
    """Place the layers on IPUs the way Graphcore's examples do: BeginBlock at the first layer of
    each IPU's run; the embeddings go with the first run, the classifier with the last. No
    user_id: popviz names each block by its modules (``layers.0-2``)."""
    if sum(layers_per_ipu) != len(model.layers):
        raise SystemExit(f"--layers-per-ipu {layers_per_ipu} covers {sum(layers_per_ipu)} layers; "
                         f"the model has {len(model.layers)}")
    model.embeddings = poptorch.BeginBlock(model.embeddings, ipu_id=0)
    first = 0
    for ipu, count in enumerate(layers_per_ipu):
        if count:
            model.layers[first] = poptorch.BeginBlock(model.layers[first], ipu_id=ipu)
        first += count
    if hasattr(model, "mlm"):  # the tied projection must sit with the word embeddings
        model.mlm = poptorch.BeginBlock(model.mlm, ipu_id=0)
        return
    last = max(i for i, c in enumerate(layers_per_ipu) if c)
    model.classifier = poptorch.BeginBlock(model.classifier, ipu_id=last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--mlm", action="store_true",
                        help="masked-LM head with a projection tied to the word embeddings, on IPU 0")
    parser.add_argument("--masked", type=int, default=20, help="positions predicted per sequence with --mlm")
    parser.add_argument("--half", action="store_true",
                        help="float16 weights and activations, float16 gradient accumulators and first "
                             "moments (as Graphcore trains BERT)")
    parser.add_argument("--offload-optimizer", action="store_true",
                        help="keep the optimizer state in streaming memory (off chip)")
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
    if args.half:
        model.half()
    split(model, layers_per_ipu)

    opts = poptorch.Options().deviceIterations(args.device_iterations)
    opts.Training.gradientAccumulation(args.gradient_accumulation)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
    if args.offload_optimizer:
        opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
    if args.half:
        optimizer = poptorch.optim.AdamW(model.parameters(), lr=1e-4, accum_type=torch.float16,
                                         first_order_momentum_accum_type=torch.float16,
                                         second_order_momentum_accum_type=torch.float32)
    else:
        optimizer = poptorch.optim.AdamW(model.parameters(), lr=1e-4)
    training = poptorch.trainingModel(model, opts, optimizer=optimizer)
    per_call = args.batch_size * args.gradient_accumulation * args.device_iterations
    for step in range(1, args.steps + 1):
        input_ids = torch.randint(0, args.vocab, (per_call, args.seq))
        if args.mlm:
            labels = torch.randint(0, args.vocab, (per_call, args.masked))
        else:
            labels = torch.randint(0, args.classes, (per_call,))
        _, loss = training(input_ids, labels)
        print(f"step {step}/{args.steps}: loss {loss.mean().item():.4f}", flush=True)
    training.detachFromDevice()


if __name__ == "__main__":
    main()
