"""Benchmark: how long the emulator takes to estimate a BERT-base-sized encoder on 4 IPUs.

    python benchmarks/emulator_bert.py [--repeat 3] [--micro-batch 8]

A BERT-base-sized encoder (vocabulary 30,522, 12 layers, hidden 768, 12 heads, FFN 3,072,
sequence 128) with a classifier head, pipelined over 4 IPUs like Graphcore's BERT examples
(embeddings and layers 0-2 on IPU0, 3-5, 6-8, 9-11 and the head on IPU3), trained with AdamW,
gradient accumulation 16. "Estimating" is what the first call costs before any training step:
tracing one micro-batch under measurement, the cost model, the schedule simulation, and writing
the report (timed separately). Target: under 30 s on the project's 2-core machine.

Prints medians over --repeat fresh executors, and the estimate's headline figures.

    python benchmarks/emulator_bert.py --calls

instead runs the estimate-only path a user takes: ``popviz emulate --calls 1 -- python
<script>``, where the script (this file with ``--script``) builds the same model with ``import
poptorch`` and calls it once with G=16; it prints the wall time and the peak memory (max RSS) of
that whole command. Target: under 30 s and under 2 GB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 30.0


def build_model(torch, poptorch, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                vocab: int = 30522, seq: int = 128, classes: int = 2):
    nn = torch.nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.norm1 = nn.LayerNorm(hidden)
            self.up = nn.Linear(hidden, ffn)
            self.down = nn.Linear(ffn, hidden)
            self.norm2 = nn.LayerNorm(hidden)

        def forward(self, x, mask):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / (hidden // heads) ** 0.5 + mask
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hidden)
            x = self.norm1(x + self.proj(context))
            return self.norm2(x + self.down(torch.nn.functional.gelu(self.up(x))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words = nn.Embedding(vocab, hidden)
            self.positions = nn.Embedding(seq, hidden)
            self.norm = nn.LayerNorm(hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.head = nn.Linear(hidden, classes)
            self.loss = nn.CrossEntropyLoss()

        def forward(self, input_ids, attention_mask, labels):
            mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
            x = self.norm(self.words(input_ids) + self.positions.weight[None, : input_ids.shape[1]])
            for layer in self.layers:
                x = layer(x, mask)
            logits = self.head(x[:, 0])
            return logits, self.loss(logits, labels)

    model = Encoder()
    per_ipu = layers // 4
    poptorch.BeginBlock(model.words, "embeddings", ipu_id=0)
    for i, layer in enumerate(model.layers):
        if i % per_ipu == 0:
            poptorch.BeginBlock(layer, f"layers{i}-{i + per_ipu - 1}", ipu_id=i // per_ipu)
    return model


TARGET_BYTES = 2 * 2**30


def script(micro_batch: int) -> int:
    """The user's script: one call of the pipelined encoder through ``import poptorch``."""
    import poptorch
    import torch

    torch.manual_seed(0)
    seq, g = 128, 16
    input_ids = torch.randint(0, 30522, (micro_batch * g, seq))
    attention_mask = torch.ones(micro_batch * g, seq, dtype=torch.long)
    labels = torch.randint(0, 2, (micro_batch * g,))
    model = build_model(torch, poptorch)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(g)
    executor = poptorch.trainingModel(model, opts, poptorch.optim.AdamW(model.parameters(), lr=1e-4))
    executor(input_ids, attention_mask, labels)
    return 0


def calls_run(micro_batch: int, repeat: int) -> int:
    """``popviz emulate --calls 1`` on :func:`script`: wall seconds and peak RSS of the command."""
    import os
    import resource
    import subprocess

    walls, rss = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "POPLAR_ENGINE_OPTIONS":
                   f'{{"autoReport.all":"true","autoReport.directory":"{tmp}"}}'}
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "popviz", "emulate", "--calls", "1", "--",
                                   sys.executable, __file__, "--script", "--micro-batch", str(micro_batch)],
                                  env=env, capture_output=True, text=True)
            walls.append(time.perf_counter() - t0)
            if proc.returncode != 0 or not (Path(tmp) / "training" / "popviz-report.json").is_file():
                print(proc.stderr, file=sys.stderr)
                return 2
        # ru_maxrss of children: the largest of all waited-for descendants (KiB on Linux)
        rss.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    wall, peak = statistics.median(walls), max(rss)
    print(f"emulator benchmark: popviz emulate --calls 1 on a BERT-base-sized encoder (12 x 768, seq 128), "
          f"micro-batch {micro_batch}, G=16, 4-IPU pipeline, one call")
    print(f"  wall time of the command (median of {len(walls)})  {wall:7.2f} s "
          f"(min {min(walls):.2f}, max {max(walls):.2f}) = {wall / TARGET_SECONDS:.0%} of {TARGET_SECONDS:.0f} s")
    print(f"  peak memory (max RSS of any process)   {peak / 2**30:7.2f} GiB = "
          f"{peak / TARGET_BYTES:.0%} of {TARGET_BYTES / 2**30:.0f} GiB")
    return 0 if wall < TARGET_SECONDS and peak < TARGET_BYTES else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", action="store_true",
                        help="time popviz emulate --calls 1 on a one-call script (wall time, peak RSS)")
    parser.add_argument("--script", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.script:
        return script(args.micro_batch)
    if args.calls:
        return calls_run(args.micro_batch, args.repeat)

    started = time.perf_counter()
    import torch

    import popviz.emulator as poptorch
    from popviz.emulator import costmodel
    from popviz.sources.bundle import write_bundle

    import_seconds = time.perf_counter() - started
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    seq, g = 128, 16
    mb = args.micro_batch
    input_ids = torch.randint(0, 30522, (mb * g, seq))
    attention_mask = torch.ones(mb * g, seq, dtype=torch.long)
    labels = torch.randint(0, 2, (mb * g,))

    build, compile_, write = [], [], []
    executor = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        model = build_model(torch, poptorch)
        t1 = time.perf_counter()
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(g)
        opts.setAvailableMemoryProportion({f"IPU{i}": 0.2 for i in range(4)})
        executor = poptorch.trainingModel(model, opts, poptorch.optim.AdamW(model.parameters(), lr=1e-4))
        executor.compile(input_ids, attention_mask, labels)
        t2 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            write_bundle(executor.popvizReport(), Path(tmp) / "training")
        t3 = time.perf_counter()
        build.append(t1 - t0)
        compile_.append(t2 - t1)
        write.append(t3 - t2)
        executor.destroy()
        del executor._user_model

    est = executor._estimate  # kept after destroy(); popvizEstimate() is None then
    figures = costmodel.summary(est)
    median_estimate = statistics.median(compile_) + statistics.median(write)
    print(f"emulator benchmark: BERT-base-sized encoder (12 x 768, seq {seq}), micro-batch {mb}, G={g}, "
          f"4-IPU pipeline, {torch.get_num_threads()} torch thread(s)")
    print(f"  import torch + popviz.emulator   {import_seconds:7.2f} s (once)")
    print(f"  build model (median)             {statistics.median(build):7.2f} s")
    print(f"  compile = trace + estimate       {statistics.median(compile_):7.2f} s "
          f"(min {min(compile_):.2f}, max {max(compile_):.2f}, n={len(compile_)})")
    print(f"  write report bundle (median)     {statistics.median(write):7.2f} s")
    print(f"  estimate total (median)          {median_estimate:7.2f} s = "
          f"{median_estimate / TARGET_SECONDS:.0%} of the {TARGET_SECONDS:.0f} s target")
    print("estimate:")
    print(f"  forward GFLOPs per micro-batch   {figures['gflops_per_micro_batch']:.1f}")
    for i, (ipu, fwd, bwd) in enumerate(figures["stages"]):
        mem = figures["memory_bytes_per_ipu"][ipu]
        print(f"  stage {i} IPU{ipu}: forward {fwd:>10,} cycles, backward {bwd:>10,}, "
              f"memory {mem / 2**20:7.1f} MiB of {est.target.bytes_per_ipu / 2**20:.0f} MiB")
    samples = mb * g
    print(f"  one call (1 weight update, {samples} samples): {figures['call_cycles']:,} cycles = "
          f"{figures['call_seconds'] * 1e3:.1f} ms -> {samples / figures['call_seconds']:,.0f} samples/s")
    print(f"  fits in memory: {figures['fits']}")
    return 0 if median_estimate < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
