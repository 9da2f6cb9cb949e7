"""P3: ViT-B/16 fine-tuning (ImageNet1k), Graphcore's configuration (Bow Pod16: 4 x 4 IPUs).

graphcore/examples vision/vit/pytorch @ 8ae588c8 (SDK 3.0), ``finetune.py --config
b16_imagenet1k``: Hugging Face's ViTForImageClassification (``PipelinedViTForImageClassification``)
in float16 with micro-batch 17, layers_per_ipu [3,3,3,3] (embeddings on IPU 0, layer norm and
head on IPU 3), G = 30, D = 8, replication 4, half partials (``--half-partials`` defaults to
true), SGD momentum 0.9 with float16 gradient accumulation and velocity and replicated tensor
sharding of its state on chip, a recomputation checkpoint on every encoder layer's output
(``recompute_mid_layers`` belongs to the pre-training model, ``models/modules.py``, not this one),
hidden dropout 0.1 (attention dropout 0), matmul_proportion 0.3, ``outputMode(All)``,
``autoRoundNumIPUs``, float16 images (the dataset casts them). Run with POPVIZ_EMULATOR_ARCH=Bow.
Not used to fit the cost model (a held-out check). The figure is ``finetune.py``'s own rate,
``len(input_data) / step_duration`` with the step's data loading and ``setOptimizer`` inside
the step; one call is 16,320 images (4.9 GB of float16 pixels), too many to run on a CPU, so
only the IPU's call is estimated here.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import ViTClassifier, place_layers

MB, G, D, R = 17, 30, 8, 4
DROPOUT = 0.1


opts = poptorch.Options().deviceIterations(D).replicationFactor(R).autoRoundNumIPUs(True)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": 0.3 for i in range(4)})
opts.outputMode(poptorch.OutputMode.All)
opts._Popart.set("defaultPrefetchBufferingDepth", 2)  # configs.yml prefetch_depth: 2
opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useReplicatedTensorSharding(True))
model = ViTClassifier(dropout=DROPOUT)
place_layers(model.layers, [3, 3, 3, 3], checkpoint=False)
for layer in model.layers:  # recompute_checkpoint_every_layer: every layer's output, the last one's too
    layer.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
model.half()
n = MB * G * D * R
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.08, momentum=0.9, loss_scaling=0.25,
                               accum_type=torch.half, velocity_accum_type=torch.half)
train_one_call(model, opts, optimizer, batch(3, 224, 224, total=n, dtype=torch.half),
               batch(total=n, dtype=torch.int64, high=1000))
