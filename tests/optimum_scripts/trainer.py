"""Train a tiny random-weight Hugging Face model with optimum-graphcore's IPUTrainer (or
IPUSeq2SeqTrainer for T5) on synthetic data, as a new user would: no hub download.

    python trainer.py {bert,gpt2,vit,t5,deberta} [--ipus N] [--g G] [--d D]

Used by tests/test_optimum.py under ``popviz capture --emulate --calls 1``."""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import transformers
from optimum.graphcore import (
    IPUConfig,
    IPUSeq2SeqTrainer,
    IPUSeq2SeqTrainingArguments,
    IPUTrainer,
    IPUTrainingArguments,
)

SEQ, VOCAB, HIDDEN = 16, 128, 32


def text_config(cls, **extra):
    return cls(vocab_size=VOCAB, hidden_size=HIDDEN, num_attention_heads=2, intermediate_size=64,
               max_position_embeddings=64, **extra)


def build(kind: str, layers: int):
    if kind == "bert":
        return transformers.BertForPreTraining(text_config(transformers.BertConfig, num_hidden_layers=layers))
    if kind == "deberta":
        config = text_config(transformers.DebertaConfig, num_hidden_layers=layers, num_labels=2,
                             relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=SEQ)
        return transformers.DebertaForSequenceClassification(config)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=layers, n_head=2,
                                         n_positions=64, n_inner=64)
        return transformers.GPT2LMHeadModel(config)
    if kind == "vit":
        config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=HIDDEN,
                                        num_hidden_layers=layers, num_attention_heads=2, intermediate_size=64,
                                        num_labels=10)
        return transformers.ViTForImageClassification(config)
    if kind == "t5":
        config = transformers.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=64, num_layers=layers,
                                       num_decoder_layers=layers, num_heads=2, decoder_start_token_id=0)
        return transformers.T5ForConditionalGeneration(config)
    raise SystemExit(f"unknown model {kind!r}")


class Synthetic(torch.utils.data.Dataset):
    def __init__(self, kind: str, n: int = 256) -> None:
        self.kind, self.n = kind, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(1, VOCAB, (SEQ,), generator=g)
        if self.kind == "vit":
            return {"pixel_values": torch.randn(3, 32, 32, generator=g), "labels": torch.tensor(i % 10)}
        if self.kind == "bert":
            return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long),
                    "token_type_ids": torch.zeros(SEQ, dtype=torch.long), "labels": ids.clone(),
                    "next_sentence_label": torch.tensor(i % 2)}
        if self.kind == "deberta":
            return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long),
                    "token_type_ids": torch.zeros(SEQ, dtype=torch.long), "labels": torch.tensor(i % 2)}
        if self.kind == "gpt2":
            return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": ids.clone()}
        return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": torch.randint(1, VOCAB, (SEQ // 2,), generator=g)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["bert", "gpt2", "vit", "t5", "deberta"])
    parser.add_argument("--ipus", type=int, default=2)
    parser.add_argument("--g", type=int, default=16)
    parser.add_argument("--d", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    layers = 2 * args.ipus
    model = build(args.model, layers)
    per_ipu = [layers // args.ipus] * args.ipus
    if args.model == "t5":  # encoder and decoder layers together
        per_ipu = [2 * layers // args.ipus] * args.ipus
    ipu_config = IPUConfig(layers_per_ipu=per_ipu, ipus_per_replica=args.ipus,
                           gradient_accumulation_steps=args.g, device_iterations=args.d,
                           executable_cache_dir="disabled")
    common = {"output_dir": "out", "per_device_train_batch_size": 1, "max_steps": 2, "logging_steps": 1,
              "report_to": "none", "dataloader_drop_last": True, "save_strategy": "no"}
    if args.model == "t5":
        trainer = IPUSeq2SeqTrainer(model=model, ipu_config=ipu_config, args=IPUSeq2SeqTrainingArguments(**common),
                                    train_dataset=Synthetic(args.model))
    else:
        trainer = IPUTrainer(model=model, ipu_config=ipu_config, args=IPUTrainingArguments(**common),
                             train_dataset=Synthetic(args.model))
    trainer.train()


if __name__ == "__main__":
    main()
