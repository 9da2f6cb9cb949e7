"""A LightningModule on one IPU with Lightning's IPU profiling switched on (``autoreport_dir``),
written the way the lightning-graphcore documentation shows.

    popviz emulate -- python examples/lightning/single_ipu.py --report-dir lightning_reports
"""

import argparse

import lightning.pytorch as pl
import torch
from lightning_graphcore import IPUStrategy
from torch.utils.data import DataLoader, TensorDataset


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def data(samples: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 32, generator=g)
    y = torch.randint(0, 4, (samples,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report-dir", default="lightning_reports")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    pl.seed_everything(0)
    strategy = IPUStrategy(autoreport=True, autoreport_dir=args.report_dir)
    trainer = pl.Trainer(accelerator="ipu", devices=1, strategy=strategy, max_epochs=args.epochs,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Classifier(), data(256), data(64))


if __name__ == "__main__":
    main()
