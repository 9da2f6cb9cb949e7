"""Benchmark: estimates in seconds for any model size (issue 24): `popviz capture --emulate --calls 1`.

    python benchmarks/emulator_estimate.py                       # every model, fake and real trace
    python benchmarks/emulator_estimate.py resnet50 bert-base    # some of them
    python benchmarks/emulator_estimate.py --repeat 3 --real-repeat 1 --no-real

Each model is a plain-PyTorch script (this file with ``--script NAME``: nothing downloaded, only
torch and ``import poptorch``) that builds the model at Graphcore's configuration and calls its
training executor once; ``popviz capture --emulate --calls 1`` stops it after that call's
estimate, as a user estimating a configuration does:

* ``resnet50``: ResNet-50 v1.5 (torchvision's layout), float16, micro-batch 18, 224x224, one IPU,
  G = 57 (Graphcore's configs.yml, replication left out: the estimate is per replica);
* ``bert-base``: BERT-Base pre-training (12 x 768, seq 128, masked-LM head tied to the word
  embeddings, next-sentence head), float16, micro-batch 32, ``layers_per_ipu=[0, 4, 4, 4]``, G = 512;
* ``bert-large-squad``: BERT-Large SQuAD fine-tuning (24 x 1024, seq 384, span head), float16,
  micro-batch 4, 3 layers on each of 8 IPUs, G = 16;
* ``gpt2-xl``: a GPT-2-XL-sized decoder (48 x 1600, 25 heads, seq 1024, vocabulary 50,257: 1.56 B
  parameters) in float16, 3 layers on each of 16 IPUs, LM head tied to the embeddings, micro-batch
  1, G = 64. Built in float16 directly, so its parameters take 3.1 GB and nothing else that size.

Two paths per model, in the same run: the fake-tensor trace (``POPVIZ_EMULATOR_TRACE=auto``, the
default) and the real one (``POPVIZ_EMULATOR_TRACE=real``, what ``--calls 1`` did before: one
micro-batch's forward computed on the CPU). The real path is skipped for the GPT-2-XL-sized
decoder: one micro-batch's forward makes 26 GiB of tensors (9.6 GiB of them saved for the
backward; the fake trace's measurement says so), which the real trace holds until it ends. Printed per model and path, medians
over the repeats: wall time of the command; CPU time (user + system of every process, which
other work on a shared machine does not inflate); the child's peak RSS (``os.wait4``: the
largest of the popviz process and the script's); and where the wall time went, from the
script's and the emulator's stderr lines time-stamped as they arrive: Python start-up and
imports (popviz's command, then the script's ``import torch`` / ``import poptorch``), the
script building its model and inputs, the optimizer and ``trainingModel`` (the first
``torch.optim`` optimizer imports ``torch._dynamo``, about 2 s), trace + estimate (the
compile), and the reports written as the script exits plus capture's summary.
Targets (issue 24): ResNet-50 and BERT-Base under 10 s, BERT-Large SQuAD under 15 s, the
GPT-2-XL-sized decoder under 30 s; peak RSS under the model's parameters plus 1.5 GB; and the
report of the fake path equal to the real path's (``popviz analyse --json``, times aside).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    name: str
    about: str
    target_seconds: float
    real: bool = True
    """Whether the real trace fits this machine (see the module's docstring)."""


CASES = (
    Case("resnet50", "ResNet-50 training, float16, micro-batch 18, 1 IPU, G=57", 10.0),
    Case("bert-base", "BERT-Base pre-training, float16, micro-batch 32, layers_per_ipu [0,4,4,4], G=512", 10.0),
    Case("bert-large-squad", "BERT-Large SQuAD, float16, seq 384, micro-batch 4, 8 IPUs, G=16", 15.0),
    Case("gpt2-xl", "GPT-2-XL-sized decoder (1.56 B parameters), float16, seq 1024, 16 IPUs, G=64", 30.0,
         real=False),
)
HEADROOM_BYTES = int(1.5 * 2**30)
"""Peak RSS target: the model's own parameters plus this."""


# ------------------------------------------------------------------ the models (plain PyTorch)


def resnet50(torch, nn):
    class Bottleneck(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            out = planes * 4
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # v1.5: stride in the 3x3
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != out:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + identity)

    class ResNet50(nn.Module):
        def __init__(self, classes: int = 1000) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages, inplanes = [], 64
            for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                layer = []
                for i in range(blocks):
                    layer.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
                    inplanes = planes * 4
                stages.append(nn.Sequential(*layer))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, classes)
            self.loss = nn.CrossEntropyLoss()

        def forward(self, images, labels):
            x = self.maxpool(self.relu(self.bn1(self.conv1(images))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            logits = self.fc(torch.flatten(self.avgpool(x), 1))
            return logits, self.loss(logits.float(), labels)

    return ResNet50()


def transformer_layer(torch, nn, hidden: int, heads: int, causal: bool):
    F = torch.nn.functional

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.norm1 = nn.LayerNorm(hidden)
            self.up = nn.Linear(hidden, 4 * hidden)
            self.down = nn.Linear(4 * hidden, hidden)
            self.norm2 = nn.LayerNorm(hidden)
            self.drop = nn.Dropout(0.1)

        def attention(self, x, mask):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / (hidden // heads) ** 0.5 + mask
            context = self.drop(scores.softmax(-1)) @ v
            return self.proj(context.transpose(1, 2).reshape(b, s, hidden))

        def forward(self, x, mask):
            if causal:  # GPT-2: pre-norm
                x = x + self.drop(self.attention(self.norm1(x), mask))
                return x + self.drop(self.down(F.gelu(self.up(self.norm2(x)))))
            x = self.norm1(x + self.drop(self.attention(x, mask)))  # BERT: post-norm
            return self.norm2(x + self.drop(self.down(F.gelu(self.up(x)))))

    return Layer()


def bert(torch, nn, poptorch, layers: int, hidden: int, heads: int, seq: int, layers_per_ipu: list[int],
         squad: bool, vocab: int = 30522, masked: int = 20):
    F = torch.nn.functional

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Embedding(seq, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.norm = nn.LayerNorm(hidden)
            self.layers = nn.ModuleList(transformer_layer(torch, nn, hidden, heads, False) for _ in range(layers))
            if squad:
                self.span = nn.Linear(hidden, 2)
            else:
                self.transform = nn.Linear(hidden, hidden)
                self.mlm_norm = nn.LayerNorm(hidden)
                self.decoder = nn.Linear(hidden, vocab)
                self.decoder.weight = self.word.weight  # tied
                self.pooler = nn.Linear(hidden, hidden)
                self.nsp = nn.Linear(hidden, 2)

        def forward(self, input_ids, token_type_ids, attention_mask, labels_a, labels_b):
            positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
            x = self.norm(self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids))
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -1000.0
            for layer in self.layers:
                x = layer(x, mask)
            if squad:
                start, end = self.span(x).float().unbind(-1)
                loss = F.cross_entropy(start, labels_a) + F.cross_entropy(end, labels_b)
                return start, end, poptorch.identity_loss(loss, reduction="none")
            with poptorch.Block("mlm", ipu_id=0):  # the tied projection sits with the embeddings
                h = self.mlm_norm(F.gelu(self.transform(x[:, :masked])))
                mlm = self.decoder(h).float()
            with poptorch.Block("nsp", ipu_id=len(layers_per_ipu) - 1):
                nsp = self.nsp(torch.tanh(self.pooler(x[:, 0]))).float()
                loss = F.cross_entropy(mlm.flatten(0, 1), labels_a.flatten()) + F.cross_entropy(nsp, labels_b)
                return poptorch.identity_loss(loss, reduction="none")

    model = Bert()
    poptorch.BeginBlock(model.word, "embeddings", ipu_id=0)
    first = 0
    for ipu, count in enumerate(layers_per_ipu):
        if count:
            poptorch.BeginBlock(model.layers[first], f"layers{first}", ipu_id=ipu)
        first += count
    return model


def gpt2(torch, nn, poptorch, layers: int = 48, hidden: int = 1600, heads: int = 25, seq: int = 1024,
         vocab: int = 50257, ipus: int = 16):
    F = torch.nn.functional

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Embedding(seq, hidden)
            self.layers = nn.ModuleList(transformer_layer(torch, nn, hidden, heads, True) for _ in range(layers))
            self.norm = nn.LayerNorm(hidden)
            self.register_buffer("causal", torch.full((seq, seq), -1000.0).triu(1)[None, None], persistent=False)

        def forward(self, input_ids, labels):
            positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
            x = self.word(input_ids) + self.position(positions)
            for layer in self.layers:
                x = layer(x, self.causal)
            x = self.norm(x)
            with poptorch.Block("lm_head", ipu_id=0):  # tied to the word embeddings (Graphcore's GPT-2)
                logits = F.linear(x, self.word.weight).float()
                return poptorch.identity_loss(F.cross_entropy(logits.flatten(0, 1), labels.flatten()),
                                              reduction="none")

    model = Decoder()
    poptorch.BeginBlock(model.word, "embeddings", ipu_id=0)
    per_ipu = layers // ipus
    for i in range(0, layers, per_ipu):
        poptorch.BeginBlock(model.layers[i], f"layers{i}", ipu_id=i // per_ipu)
    return model


def script(name: str) -> int:
    """The user's script: build the model and its inputs, call the training executor once."""
    import poptorch
    import torch

    nn = torch.nn
    print("benchmark-phase imported", file=sys.stderr, flush=True)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float16)  # parameters made in float16: no float32 copy first
    opts = poptorch.Options()
    if name == "resnet50":
        mb, g = 18, 57
        model = resnet50(torch, nn)
        inputs = (torch.randn(mb * g, 3, 224, 224), torch.randint(0, 1000, (mb * g,)))
    elif name in ("bert-base", "bert-large-squad"):
        base = name == "bert-base"
        mb, g, seq = (32, 512, 128) if base else (4, 16, 384)
        split = [0, 4, 4, 4] if base else [3] * 8
        model = bert(torch, nn, poptorch, 12 if base else 24, 768 if base else 1024, 12 if base else 16, seq,
                     split, squad=not base)
        n = mb * g
        labels_a = torch.randint(0, 30522, (n, 20)) if base else torch.randint(0, seq, (n,))
        inputs = (torch.randint(0, 30522, (n, seq)), torch.zeros(n, seq, dtype=torch.long),
                  torch.ones(n, seq, dtype=torch.long), labels_a, torch.randint(0, 2 if base else seq, (n,)))
        opts.setExecutionStrategy(poptorch.PipelinedExecution())
    else:
        mb, g, seq = 1, 64, 1024
        model = gpt2(torch, nn, poptorch, seq=seq)
        inputs = (torch.randint(0, 50257, (mb * g, seq)), torch.randint(0, 50257, (mb * g, seq)))
        opts.setExecutionStrategy(poptorch.PipelinedExecution())
    torch.set_default_dtype(torch.float32)
    opts.Training.gradientAccumulation(g)
    opts.Precision.setPartialsType(torch.float16)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"benchmark-phase built {params}", file=sys.stderr, flush=True)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    executor = poptorch.trainingModel(model, opts, optimizer)
    executor(*inputs)
    return 0


# ------------------------------------------------------------------ the measurement


@dataclass
class Run:
    wall_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int
    phases: dict[str, float]
    param_bytes: int
    analysis: dict


PHASES = (
    ("start", "imported", "Python start-up, import torch and poptorch (popviz)"),
    ("imported", "built", "the script builds the model and its inputs"),
    ("built", "compiling", "optimizer and trainingModel (torch.optim imports torch._dynamo)"),
    ("compiling", "estimated", "trace + estimate (the compile)"),
    ("estimated", "end", "reports written at exit, capture's summary"),
)


def _stable(value):
    volatile = {"captured_at", "root", "path", "wall_seconds", "compile_seconds", "written_at"}
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def run_once(case: Case, trace: str, threads: str | None) -> Run:
    """One `popviz capture --emulate --calls 1` of the case's script: wall time, the child's peak
    RSS, and when each phase ended (stderr lines time-stamped as they arrive)."""
    with tempfile.TemporaryDirectory(prefix="popviz-estimate-") as tmp:
        out = Path(tmp) / "capture"
        env = {**os.environ, "POPVIZ_EMULATOR_TRACE": trace, "POPVIZ_EMULATOR_IGNORE_OOM": "1"}
        if threads:
            env["OMP_NUM_THREADS"] = threads
        command = [sys.executable, "-m", "popviz", "capture", "-o", str(out), "--emulate", "--calls", "1", "--",
                   sys.executable, str(Path(__file__).resolve()), "--script", case.name]
        started = time.time()
        stamps, lines, params = {"start": 0.0}, [], 0
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True)
        for line in proc.stderr:
            now = time.time() - started
            lines.append(line)
            if line.startswith("benchmark-phase "):
                parts = line.split()
                stamps[parts[1]] = now
                if parts[1] == "built":
                    params = int(parts[2])
            elif "popviz emulator: compiling" in line:  # the first line; later ones are heartbeats
                stamps.setdefault("compiling", now)
            elif "popviz emulator:" in line and "estimated in " in line:
                stamps.setdefault("estimated", now)
        _, status, usage = os.wait4(proc.pid, 0)
        stamps["end"] = time.time() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 or len(stamps) != len(PHASES) + 1:
            raise SystemExit(f"{case.name} ({trace}): `{' '.join(command[3:])}` exited {proc.returncode}:\n"
                             f"{''.join(lines)[-3000:]}")
        analysis = subprocess.run([sys.executable, "-m", "popviz", "analyse", str(out), "--json"], cwd=ROOT,
                                  capture_output=True, text=True, env=env)
        if analysis.returncode != 0:
            raise SystemExit(f"{case.name} ({trace}): popviz analyse failed:\n{analysis.stderr[-2000:]}")
        phases = {what: stamps[b] - stamps[a] for a, b, what in PHASES}
        return Run(stamps["end"], usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, phases, params,
                   _stable(json.loads(analysis.stdout)))


def _median(values) -> float:
    return statistics.median(values)


def report(case: Case, trace: str, runs: list[Run]) -> bool:
    wall = _median(r.wall_seconds for r in runs)
    rss = _median(r.peak_rss_bytes for r in runs)
    params = runs[0].param_bytes
    limit = params + HEADROOM_BYTES
    print(f"  {trace:4} trace: wall {wall:7.2f} s (median of {len(runs)}: "
          f"{', '.join(f'{r.wall_seconds:.2f}' for r in runs)}), peak RSS {rss / 2**30:5.2f} GiB "
          f"(parameters {params / 2**30:.2f} GiB + 1.5 = {limit / 2**30:.2f} GiB limit)")
    print(f"        CPU time (user + system, every thread and process) {_median(r.cpu_seconds for r in runs):.2f} s; "
          f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for _, _, what in PHASES:
        value = _median(r.phases[what] for r in runs)
        print(f"        {value:7.2f} s {value / wall:4.0%}  {what}")
    if trace != "fake":
        return True
    ok = wall < case.target_seconds and rss < limit
    print(f"        target: under {case.target_seconds:.0f} s and {limit / 2**30:.2f} GiB -> "
          f"{'met' if ok else 'NOT met'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"some of: {', '.join(c.name for c in CASES)} (default: all)")
    parser.add_argument("--script", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3, help="runs of the fake-trace path (median)")
    parser.add_argument("--real-repeat", type=int, default=3, help="runs of the real-trace path (median)")
    parser.add_argument("--no-real", action="store_true", help="skip the real-trace path")
    parser.add_argument("--threads", default=None, help="OMP_NUM_THREADS for the script (default: torch's)")
    args = parser.parse_args()
    if args.script:
        return script(args.script)
    unknown = sorted(set(args.models) - {c.name for c in CASES})
    if unknown:
        print(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(c.name for c in CASES)}", file=sys.stderr)
        return 2
    chosen = [c for c in CASES if not args.models or c.name in args.models]
    print(f"popviz capture --emulate --calls 1, {os.cpu_count()} CPUs, OMP_NUM_THREADS={args.threads or 'default'}")
    met = True
    for case in chosen:
        print(f"{case.name}: {case.about}")
        fake = [run_once(case, "auto", args.threads) for _ in range(args.repeat)]
        met &= report(case, "fake", fake)
        if case.real and not args.no_real and args.real_repeat > 0:
            real = [run_once(case, "real", args.threads) for _ in range(args.real_repeat)]
            report(case, "real", real)
            same = fake[0].analysis == real[0].analysis
            speedup = _median(r.wall_seconds for r in real) / _median(r.wall_seconds for r in fake)
            print(f"        fake vs real: {speedup:.1f}x faster; reports {'identical' if same else 'DIFFER'} "
                  "(popviz analyse --json, times and paths aside)")
            met &= same
        elif not case.real:
            print("  real trace: skipped (one micro-batch's forward makes 26 GiB of tensors, held until the trace ends)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
