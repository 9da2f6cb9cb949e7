"""Stand-in of the shape of PopTorch's custom-op tutorial (graphcore/examples
tutorials/feature_examples/pytorch/custom_op/poptorch_custom_op.py): it checks its library with
``pathlib.Path.exists``, loads it with ``torch.ops.load_library`` and uses its ``LeakyRelu``
op; a second, unknown op takes the documented fallback."""

import pathlib

import poptorch
import torch

myso = pathlib.Path("leaky_relu_example/build/custom_ops.so")
assert myso.exists(), "Failed to find Leaky ReLU Custom op file: `custom_ops.so`. Have you run make?"
torch.ops.load_library(myso)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = poptorch.custom_op([self.fc(x)], "LeakyRelu", "custom.ops", 1, example_outputs=[x],
                               attributes={"alpha": 0.1})[0]
        z = poptorch.custom_op([y], "Unknown", "custom.ops", 1, example_outputs=[y])[0]
        return y, z


net = Net()
with torch.no_grad():
    net.fc.weight.copy_(torch.eye(4))
    net.fc.bias.zero_()
model = poptorch.inferenceModel(net)
y, z = model(torch.tensor([[-1.0, 2.0, -3.0, 4.0]]))
print("leaky", [round(v, 3) for v in y[0].tolist()], "fallback", z.abs().sum().item(),
      "loaded", len(torch.ops.loaded_libraries))
