"""Stand-in of the shape of Graphcore's speech/conformer, vision/dino and vision/swin
applications: it asserts its make-built custom-op library exists, loads it with ctypes (once
at the top, once more inside ``forward`` as conformer does) and uses its ops (RemapCE, Ctc,
ExpMovAvg) in a two-IPU pipelined training model. The library is never built here."""

import ctypes
import os
import sys

import poptorch
import torch

SO = os.path.join("build", "custom_ops.so")
assert os.path.exists(SO), "please compile custom op: run make"
try:
    ctypes.cdll.LoadLibrary("./" + SO)
except OSError:
    raise SystemExit("custom_ops.so not found. Please run `make` first.") from None


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 6)
        self.teacher = torch.nn.Linear(16, 16)
        for p in self.teacher.parameters():
            p.requires_grad_(False)

    def forward(self, x, targets, input_lengths, target_lengths):
        ctypes.cdll.LoadLibrary("./" + SO)  # conformer loads it in forward
        with poptorch.Block("enc", ipu_id=0):
            h = self.encoder(x)
            h = poptorch.custom_op([h], "RemapCE", "ai.graphcore", 1, example_outputs=[h],
                                   attributes={"fwd_grain_size": 16, "bwd_grain_size": 16,
                                               "fwd_clone_layout": 0, "bwd_clone_layout": 0,
                                               "fwd_after_matmul": 0, "bwd_after_matmul": 0,
                                               "debug_str": "remap"})[0]
        with poptorch.Block("head", ipu_id=1):
            log_probs = self.head(h).log_softmax(-1).transpose(0, 1)  # [T, N, C]
            dummy = torch.zeros((), dtype=log_probs.dtype, requires_grad=True)
            loss = poptorch.custom_op([log_probs, targets, input_lengths, target_lengths], "Ctc",
                                      "ai.graphcore", 1, example_outputs=[dummy, log_probs],
                                      attributes={"reduction": "Sum", "blank": 0,
                                                  "outDataType": "UNDIFINED",
                                                  "enableReducedClassesInLabel": True})[0]
            with torch.no_grad():
                for q, k in zip(self.encoder.parameters(), self.teacher.parameters(), strict=True):
                    poptorch.custom_op([q, k, torch.tensor(0.99)], "ExpMovAvg", "com.acme", 1,
                                       example_outputs=[q], attributes={})
            return poptorch.identity_loss(loss, reduction="sum")


opts = poptorch.Options().deviceIterations(2)
opts.Training.gradientAccumulation(4)
opts.setExecutionStrategy(poptorch.PipelinedExecution("enc", "head"))
net = Model()
model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.01))
n = 2 * 4 * 2
x = torch.randn(n, 10, 16)
targets = torch.randint(1, 6, (n, 3))
loss = model(x, targets, torch.full((n,), 10), torch.full((n,), 3))
print("loss", float(loss))
sys.exit(0)
