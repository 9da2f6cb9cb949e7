"""Regenerate the synthetic sample reports in this directory.

    python sample_reports/generate.py

The samples are built with popviz.testing (figures chosen to look like a BERT-style model, not
measured); tests/test_samples.py checks the committed files still equal what this script makes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from popviz import testing
from popviz.model import Report
from popviz.sources.bundle import write_bundle

HERE = Path(__file__).resolve().parent

BERT_BLOCKS = [["embeddings", "encoder.layer.0-2"], ["encoder.layer.3-5"], ["encoder.layer.6-8"],
               ["encoder.layer.9-11", "qa_outputs"]]
BERT_INPUTS = {"input_ids": ((8, 128), "int32"), "attention_mask": ((8, 128), "int32"),
               "token_type_ids": ((8, 128), "int32"), "start_positions": ((8,), "int32"),
               "end_positions": ((8,), "int32")}


def samples() -> dict[str, list[Report]]:
    """Sample directory name -> its engines."""
    training = testing.pipeline_report(
        [410_000, 380_000, 380_000, 610_000], name="training", mode="training",
        gradient_accumulation=12, device_iterations=4, output_mode="All", blocks=BERT_BLOCKS,
        memory_frac=[0.83, 0.62, 0.62, 0.71], hot_tiles={0: [(14, 0.93), (3, 0.97)]},
        inputs=BERT_INPUTS, outputs={"loss": ((), "float32"), "logits": ((8, 128, 2), "float16")},
        available_memory_proportion={0: 0.1, 1: 0.15, 2: 0.15, 3: 0.15},
    )
    inference = testing.pipeline_report(
        [140_000, 126_000, 126_000, 205_000], name="inference", mode="inference",
        strategy="ShardedExecution", device_iterations=32, output_mode="All", blocks=BERT_BLOCKS,
        memory_frac=[0.55, 0.41, 0.41, 0.47], inputs={k: v for k, v in BERT_INPUTS.items()
                                                    if "positions" not in k},
        outputs={"logits": ((8, 128, 2), "float16")},
    )
    oom = testing.pipeline_report(
        [900_000, 700_000], name="training", mode="training", gradient_accumulation=8,
        memory_frac=[0.97, 0.74], hot_tiles={0: [(40, 1.08), (200, 0.99)]}, execution=False,
        blocks=[["embeddings", "encoder.layer.0-11"], ["lm_head"]],
    )
    return {"bert_pipeline": [training, inference], "oom_compile": [oom]}


def main() -> int:
    for directory, reports in samples().items():
        target = HERE / directory
        if target.exists():
            shutil.rmtree(target)
        for report in reports:
            write_bundle(report, target / report.name)
        print(f"wrote {target.relative_to(HERE.parent)}: {', '.join(r.name for r in reports)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
