"""Plain-PyTorch re-implementations of the calibration models' shapes (random weights, no hub).

Each follows the configuration in ``shared/reference/hardware-figures.md`` (the Hugging Face /
torchvision / Graphcore model it stands for is named in each class). Only torch is needed.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# ------------------------------------------------------------------------------ transformers


class EncoderLayer(nn.Module):
    """A BERT/ViT encoder layer (post-LN for BERT, pre-LN for ViT), Hugging Face's layout:
    separate query/key/value projections, GELU feed-forward."""

    def __init__(self, hidden: int, heads: int, ffn: int, eps: float = 1e-12, pre_norm: bool = False,
                 causal: bool = False, dropout: float = 0.0, attention_dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.pre_norm, self.causal = heads, pre_norm, causal
        # Hugging Face's hidden dropout: after the attention's output projection and after the
        # feed-forward; its attention dropout: on the attention probabilities (0: no dropout op)
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()
        self.attention_drop = nn.Dropout(attention_dropout) if attention_dropout else nn.Identity()
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=eps)

    def _attention(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if mask is not None:
            scores = scores + mask
        ctx = self.attention_drop(torch.softmax(scores, dim=-1)) @ v
        return self.drop(self.out(ctx.transpose(1, 2).reshape(b, s, h)))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre_norm:
            x = x + self._attention(self.norm1(x), mask)
            return x + self.drop(self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x)))))
        x = self.norm1(x + self._attention(x, mask))
        return self.norm2(x + self.drop(self.fc2(torch.nn.functional.gelu(self.fc1(x)))))


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, positions: int = 512, eps: float = 1e-12) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, ids: torch.Tensor, token_types: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.norm(self.word(ids) + self.position(pos) + self.token_type(token_types))


def extended_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (1.0 - mask[:, None, None, :].to(dtype)) * -10000.0


# ------------------------------------------------------------------------------ vision


class BertSquad(nn.Module):
    """Hugging Face's BertForQuestionAnswering, as the SQuAD figures ran it: embeddings, the
    encoder layers, a 2-way span head; the loss as ``poptorch.identity_loss`` of the two
    cross-entropies (Graphcore's and optimum-graphcore's models)."""

    def __init__(self, vocab: int = 30522, hidden: int = 1024, layers: int = 24, heads: int = 16, ffn: int = 4096,
                 eps: float = 1e-12, dropout: float = 0.0, attention_dropout: float = 0.0) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, eps=eps)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, eps=eps, dropout=dropout,
                                                 attention_dropout=attention_dropout) for _ in range(layers))
        self.qa_outputs = nn.Linear(hidden, 2)

    def forward(self, ids, types, mask, start, end):
        import poptorch

        x = self.embeddings(ids, types)
        m = extended_mask(mask, x.dtype)
        for layer in self.layers:
            x = layer(x, m)
        start_logits, end_logits = self.qa_outputs(x).float().split(1, dim=-1)
        loss = poptorch.identity_loss((nn.functional.cross_entropy(start_logits.squeeze(-1), start)
                                       + nn.functional.cross_entropy(end_logits.squeeze(-1), end)) / 2,
                                      reduction="none")
        return start_logits, end_logits, loss


class ViTClassifier(nn.Module):
    """Graphcore's PipelinedViTForImageClassification (graphcore/examples vision/vit/pytorch):
    Hugging Face's ViT-B/16 embeddings and pre-LN encoder with hidden dropout, the final norm and
    classifier in a block on ``head_ipu``; for pre-training a 768-wide pre-logits layer
    (``representation``), uint8 images cast on the IPU (``cast_input``) and a summed loss."""

    def __init__(self, hidden: int = 768, layers: int = 12, heads: int = 12, ffn: int = 3072, labels: int = 1000,
                 dropout: float = 0.1, attention_dropout: float = 0.0, representation: bool = False,
                 cast_input: bool = False, reduction: str = "mean", head_ipu: int = 3) -> None:
        super().__init__()
        self.cast_input, self.reduction, self.head_ipu = cast_input, reduction, head_ipu
        self.patch = nn.Conv2d(3, hidden, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos = nn.Parameter(torch.zeros(1, 197, hidden))
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, eps=1e-6, pre_norm=True, dropout=dropout,
                                                 attention_dropout=attention_dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden, eps=1e-6)
        if representation:
            self.pre_logits = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.classifier = nn.Linear(hidden, labels)

    def forward(self, pixels, labels):
        import poptorch

        x = self.patch(pixels.half() if self.cast_input else pixels).flatten(2).transpose(1, 2)
        x = self.drop(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos)
        for layer in self.layers:
            x = layer(x)
        with poptorch.Block("head", ipu_id=self.head_ipu):
            features = self.norm(x[:, 0])
            if hasattr(self, "pre_logits"):
                features = self.pre_logits(features)
            logits = self.classifier(features)
            if self.reduction == "sum":
                return nn.functional.cross_entropy(logits.float(), labels, reduction="sum"), logits
            return nn.functional.cross_entropy(logits, labels), logits


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 v1.5 bottleneck (stride on the 3x3 convolution); with ``groups``
    and ``cout``, ResNeXt's (a grouped 3x3 convolution ``width`` channels wide)."""

    def __init__(self, cin: int, width: int, stride: int, groups: int = 1, cout: int | None = None) -> None:
        super().__init__()
        cout = cout or width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet50(nn.Module):
    """torchvision.models.resnet50() in shape: stem, 3-4-6-3 bottlenecks, 1000 classes; with
    ``groups=32, width_per_group=4``, torchvision.models.resnext50_32x4d()."""

    def __init__(self, classes: int = 1000, groups: int = 1, width_per_group: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            stage = []
            for i in range(blocks):
                inner = width * width_per_group * groups // 64
                stage.append(Bottleneck(cin, inner, stride if i == 0 else 1, groups, width * 4))
                cin = width * 4
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


class ClassificationModel(nn.Module):
    """The efficient-data-loading tutorial's CNN (B1-B9)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(41772, 100)
        self.fc2 = nn.Linear(100, 10)
        self.log_softmax = nn.LogSoftmax(dim=0)
        self.loss = nn.NLLLoss()

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.norm(torch.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.log_softmax(self.fc2(torch.relu(self.fc1(x))))
        return x if labels is None else (x, self.loss(x, labels))


def place_layers(layers: nn.ModuleList, layers_per_ipu: list[int], checkpoint: bool) -> None:
    """Graphcore's placement (optimum-graphcore, examples' BERT): layer i starts a block on its IPU
    given ``layers_per_ipu``; with ``checkpoint`` each layer but the last checkpoints its output
    (``recompute_checkpoint_every_layer``)."""
    import poptorch

    ipu_of = [ipu for ipu, n in enumerate(layers_per_ipu) for _ in range(n)]
    for i, layer in enumerate(layers):
        if checkpoint and i != len(layers) - 1:
            layer.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
        layers[i] = poptorch.BeginBlock(layer, f"layer{i}", ipu_id=ipu_of[i])
