"""G2: ViT-B/16 pre-training on ImageNet-1k with LAMB, Graphcore's configuration (Bow Pod16: 4 x 4 IPUs).

Not in the figures file: Graphcore's performance results (the Chinese mirror cited for P3 and
P6) list "ViT, Pre-Training, Bow Pod16, SDK 3.0, PyTorch, batch size 65,536": 7,615 items/s.
The configuration with that batch is graphcore/examples vision/vit/pytorch configs.yml
``b16_in1k_pretrain_lamb`` (@8ae588c8, SDK 3.0; benchmark ``pytorch_vit_lamb_pretrain_gen_pod16``:
``--optimizer-state-offchip false --byteio true --dataset generated``): micro-batch 8,
layers_per_ipu [3,3,3,3], G = 2048, D = 1, replication 4 (8 x 2048 x 4 = 65,536), float16 with
half partials, LAMB with its state on chip and sharded over the replicas, a recomputation
checkpoint on every encoder layer's output, hidden and attention dropout 0.1,
matmul_proportion 0.3, a 768-wide pre-logits layer (representation_size), uint8 images cast on
the IPU (byteio), ``prefetch_depth: 2``. Left out: the extra checkpoints inside layers 1, 4, 7
and 10 (``recompute_mid_layers``) and mixup. Run with POPVIZ_EMULATOR_ARCH=Bow. A held-out check:
nothing was fitted to it.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import ViTClassifier, place_layers

MB, G, D, R = 8, 2048, 1, 4
DROPOUT = 0.1


opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": 0.3 for i in range(4)})
opts._Popart.set("defaultPrefetchBufferingDepth", 2)  # configs.yml prefetch_depth: 2
opts.TensorLocations.setOptimizerLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(True).useReplicatedTensorSharding(True))
model = ViTClassifier(dropout=DROPOUT, attention_dropout=DROPOUT, representation=True, cast_input=True,
                      reduction="sum")
place_layers(model.layers, [3, 3, 3, 3], checkpoint=False)
for layer in model.layers:  # recompute_checkpoint_every_layer: every layer's output, the last one's too
    layer.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
model.half()
n = MB * G * D * R
train_one_call(model, opts, poptorch.optim.LAMB(model.parameters(), lr=0.001, loss_scaling=128),
               batch(3, 224, 224, total=n, dtype=torch.uint8, high=255), batch(total=n, dtype=torch.int64, high=1000))
