#!/usr/bin/env python3
"""Regenerate the captured sample reports: each example in examples/ under `popviz capture --emulate`.

    python sample_reports/regenerate.py               # every captured sample
    python sample_reports/regenerate.py cnn_replicated mnist_pipeline
    python sample_reports/regenerate.py --into DIR    # write elsewhere (what the test does)

Each sample is the directory `popviz capture -o` made for one example script run with fixed,
small arguments, so it is deterministic: the estimates come from the emulator's cost model, not
from the clock. Only the run record (times, paths, process ids) and the capture timestamps differ
between two regenerations; tests/test_samples.py compares everything else of `popviz analyse
--json`. A sample is replaced only once its new capture succeeded (nothing is lost on failure);
a script that fails by design (`oom_model`: its compile runs out of memory) must exit with the
code it is expected to, and `popviz capture` keeps its report and records the failed run.
The synthetic samples made with popviz.testing are written by generate.py instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Sample:
    name: str
    script: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    expect_exit: int = 0
    requires: tuple[str, ...] = ()
    """Python modules the script needs beyond popviz and torch (a sample whose module is missing is
    skipped with a line saying so)."""
    about: str = ""
    findings: tuple[str, ...] = ()
    """The finding codes `popviz analyse` gives on the sample, over all its engines: what its line in
    the README's and docs/getting-started.md's sample tables promises (tests check it)."""


BERT_ARGS = ("--steps", "1", "--mlm", "--masked", "128", "--gradient-accumulation", "64")
"""bert_even_split: 12 layers, 3 per IPU; the tied masked-LM head takes the pipeline back to IPU 0
and predicts every position (``--masked 128``, as Hugging Face's BertForMaskedLM does): with
small products dominated by their fixed cost, that projection is what makes IPU 0 the slowest."""
BERT_PLANNED = "1,4,4,3"
"""What `popviz plan sample_reports/bert_even_split` proposes (a test checks it still does)."""

SAMPLES: tuple[Sample, ...] = (
    Sample("mnist_pipeline", "examples/mnist_pipeline.py", ("--steps", "3"),
           about="Graphcore's pipelined MNIST tutorial: four blocks on four IPUs",
           findings=("HIO001", "HIO002", "HIO003")),
    Sample("cnn_replicated", "examples/cnn_replicated.py", ("--steps", "2"),
           about="a CNN data-parallel over 4 replicas; inference returns every micro-batch (OutputMode.All)",
           findings=("HIO001", "HIO003")),
    Sample("bert_even_split", "examples/bert_pipeline.py", BERT_ARGS,
           about="a BERT-style encoder pre-trained with a masked-LM head tied to the embeddings, 3 "
                 "layers on each of 4 IPUs: IPU 0 also holds the embeddings and runs the head",
           findings=("PIPE001",)),
    Sample("bert_planned", "examples/bert_pipeline.py", (*BERT_ARGS, "--layers-per-ipu", BERT_PLANNED),
           about="the same model with the split `popviz plan bert_even_split` proposes "
                 f"(layers_per_ipu=[{BERT_PLANNED.replace(',', ', ')}])",
           findings=()),
    Sample("oom_model", "examples/oom_model.py", ("--steps", "1"), expect_exit=1,
           about="a BERT-base-wide encoder on 2 IPUs whose split overfills IPU 0: the compile fails "
                 "(poptorch.Error) and leaves a memory-only report",
           findings=("MEM001", "MEM004", "MEM006")),
    Sample("lightning_pipeline", "examples/lightning/block_pipeline_predict.py", ("--samples", "640"),
           requires=("lightning_graphcore",),
           about="a PyTorch Lightning IPUStrategy module pipelined with poptorch.Block: fit, validate, predict",
           findings=("HIO001", "HIO002", "HIO003", "PIPE003")),
)


def available(sample: Sample) -> str | None:
    """None when the sample can be made here, else why not."""
    import importlib.util

    for module in sample.requires:
        if importlib.util.find_spec(module) is None:
            return f"needs the Python module {module!r}"
    return None


def capture(sample: Sample, target: Path) -> None:
    """Run the sample's script under `popviz capture --emulate` into target (which must not exist)."""
    # The script runs as `python` (this interpreter first on PATH), so the run record, and the
    # re-run command `popviz plan` prints from it, read as a user would type them.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "100", **sample.env,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    command = [sys.executable, "-m", "popviz", "capture", "-o", str(target), "--emulate", "--",
               "python", sample.script, *sample.args]
    proc = subprocess.run(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if proc.returncode != sample.expect_exit:
        raise SystemExit(f"{sample.name}: `{' '.join(command[3:])}` exited {proc.returncode} "
                         f"(expected {sample.expect_exit}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def regenerate(names: list[str], into: Path) -> list[Path]:
    chosen = [s for s in SAMPLES if not names or s.name in names]
    unknown = sorted(set(names) - {s.name for s in SAMPLES})
    if unknown:
        raise SystemExit(f"unknown sample(s) {', '.join(unknown)}; known: {', '.join(s.name for s in SAMPLES)}")
    written = []
    into.mkdir(parents=True, exist_ok=True)
    for sample in chosen:
        reason = available(sample)
        if reason:
            print(f"skipped {sample.name}: {reason}")
            continue
        with tempfile.TemporaryDirectory(prefix=f".{sample.name}-", dir=into) as tmp:
            fresh = Path(tmp) / sample.name
            capture(sample, fresh)
            target = into / sample.name
            if target.exists():
                shutil.rmtree(target)
            fresh.rename(target)
        print(f"wrote {target}")
        written.append(target)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="samples to make (default: all)")
    ap.add_argument("--into", type=Path, default=HERE, help="parent directory (default: sample_reports/)")
    args = ap.parse_args()
    regenerate(args.names, args.into)
    return 0


if __name__ == "__main__":
    sys.exit(main())
