"""A LightningModule pipelined with ``with poptorch.Block(ipu_id=...)`` inside ``forward``, with
its own training and inference ``poptorch.Options``, then fit, validate and predict.

    popviz capture -o cap --emulate -- python examples/lightning/block_pipeline_predict.py
    popviz analyse cap
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
        self.layer1 = torch.nn.Linear(20, 128)
        self.layer2 = torch.nn.Linear(128, 64)
        self.layer3 = torch.nn.Linear(64, 64)
        self.layer4 = torch.nn.Linear(64, 10)

    def forward(self, x):
        with poptorch.Block(ipu_id=0):
            x = torch.relu(self.layer1(x))
        with poptorch.Block(ipu_id=1):
            x = torch.relu(self.layer2(x))
        with poptorch.Block(ipu_id=2):
            x = torch.relu(self.layer3(x))
        with poptorch.Block(ipu_id=3):
            x = torch.log_softmax(self.layer4(x), dim=1)
        return x

    # PopTorch has no active block once a ``with poptorch.Block`` ends, and every operation must
    # belong to one: what the steps compute after ``forward`` goes in a block too (the last IPU).
    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self(x)
        with poptorch.Block(ipu_id=3):
            return torch.nn.functional.nll_loss(out, y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        out = self(x)
        with poptorch.Block(ipu_id=3):
            return torch.nn.functional.nll_loss(out, y)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x, _ = batch
        out = self(x)
        with poptorch.Block(ipu_id=3):
            return out.argmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device-iterations", type=int, default=20)
    parser.add_argument("--gradient-accumulation", type=int, default=8)
    parser.add_argument("--samples", type=int, default=1280)
    args = parser.parse_args()
    pl.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(args.samples, 20, generator=g), torch.randint(0, 10, (args.samples,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)

    training = poptorch.Options()
    training.deviceIterations(args.device_iterations)
    training.Training.gradientAccumulation(args.gradient_accumulation)
    training.outputMode(poptorch.OutputMode.All)
    inference = poptorch.Options()
    inference.deviceIterations(args.device_iterations)

    strategy = IPUStrategy(training_opts=training, inference_opts=inference)
    trainer = pl.Trainer(accelerator="ipu", devices=1, strategy=strategy, max_epochs=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False)
    model = Pipelined()
    trainer.fit(model, loader, loader)
    predictions = trainer.predict(model, loader)
    print(f"predicted {sum(p.numel() for p in predictions)} samples in {len(predictions)} batches")


if __name__ == "__main__":
    main()
