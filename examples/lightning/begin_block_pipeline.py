"""A LightningModule pipelined over four IPUs with ``poptorch.BeginBlock`` (the pattern of
Lightning's IPU model-parallelism documentation).

    popviz capture -o cap --emulate -- python examples/lightning/begin_block_pipeline.py
"""

import argparse

import lightning.pytorch as pl
import poptorch
import torch
from lightning_graphcore import IPUStrategy
from torch.utils.data import DataLoader, TensorDataset


class Pipelined(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        # layer1 on IPU 0, layer2 + layer3 on IPU 1, layer4 on IPU 2, the softmax on IPU 3
        self.layer1 = poptorch.BeginBlock(torch.nn.Linear(16, 64), ipu_id=0)
        self.layer2 = poptorch.BeginBlock(torch.nn.Linear(64, 32), ipu_id=1)
        self.layer3 = torch.nn.Linear(32, 32)
        self.layer4 = poptorch.BeginBlock(torch.nn.Linear(32, 8), ipu_id=2)
        self.softmax = poptorch.BeginBlock(torch.nn.LogSoftmax(dim=1), ipu_id=3)

    def forward(self, x):
        x = torch.relu(self.layer1(x))
        x = torch.relu(self.layer2(x))
        x = torch.relu(self.layer3(x))
        return self.softmax(self.layer4(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.nll_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device-iterations", type=int, default=4)
    args = parser.parse_args()
    pl.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(512, 16, generator=g), torch.randint(0, 8, (512,), generator=g)
    training = poptorch.Options()
    training.deviceIterations(args.device_iterations)
    training.Training.gradientAccumulation(8)  # at least 2 * 4 - 1 stages when training
    strategy = IPUStrategy(training_opts=training)
    trainer = pl.Trainer(accelerator="ipu", devices=1, strategy=strategy, max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Pipelined(), DataLoader(TensorDataset(x, y), batch_size=4))


if __name__ == "__main__":
    main()
