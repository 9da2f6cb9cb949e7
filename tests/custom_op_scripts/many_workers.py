"""A DataLoader with 64 workers feeding a training model, as Graphcore's benchmark
configurations start 16-64 (DINO, MAE, Conformer); each sample holds 1 MB, so 64 workers each
building two combined batches ahead would hold gigabytes. Every process it starts carries
POPVIZ_TEST_MARKER in its environment, so a test can look for survivors."""

import os
import subprocess
import sys

import poptorch
import torch


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        return torch.ones(256 * 1024), torch.tensor(i % 2)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256 * 1024, 2)

    def forward(self, x, y):
        out = self.fc(x)
        return out, torch.nn.functional.cross_entropy(out, y)


opts = poptorch.Options().deviceIterations(4)
opts.Training.gradientAccumulation(8)
loader = poptorch.DataLoader(opts, Data(), batch_size=2, num_workers=int(sys.argv[1]) if len(sys.argv) > 1 else 64,
                             shuffle=True)
print("workers", loader.num_workers, "pid", os.getpid(), flush=True)
net = Net()
model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
# a process of the script's own that would outlive it, holding its output pipe
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
for x, y in loader:
    model(x, y)
