"""H6: Swin-Tiny (224) training in FP32, Graphcore's configuration (Bow Pod16: 4 replicas x 4 IPUs).

Held out, not in the figures file: Graphcore's performance results (https://www.graphcore.cn/
performance-results/, the mirror cited for P3 and P6) list "Swin-Tiny (224), Vision Transformer -
Pre-Training, Bow Pod16, SDK 3.0, PyTorch, ImageNet1k, batch size 1,024, precision 32.32":
3,779 items/s. graphcore/examples vision/swin/pytorch @ 8ae588c (SDK 3.0): benchmarks.yml
``pytorch_swin_tiny_train_real_pod16`` runs ``python train_swin.py --cfg SWIN_TINY --data-path
... --training-steps 10`` (one process). configs/configs.yaml ``SWIN_TINY`` over config.py's
defaults: micro-batch 4, G 64, 4 replicas, D 1 (4 x 64 x 4 = 1,024), LAYERS_PER_IPU [2,3,5,2]
(the 12 Swin blocks: IPU 0 has the patch embedding and blocks 0-1, IPU 1 blocks 2-4, IPU 2 5-9,
IPU 3 10-11 with the final norm, pooling, head and loss), AMP 0.12 (config.py default),
PRECISION ['float','float'] (FP32 inputs and model, float partials), stochastic rounding,
AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0.05, none on 1-D parameters and the relative
position bias tables, fp32 gradient accumulators, fp16 first moment, fp32 second moment,
max_grad_norm 5.0, loss scaling 1024) with its state on chip, not sharded (OPTIMIZER.RTS
False), defaultBufferingDepth 3, reduction Mean, auto stage SameAsIpu, no recomputation
checkpoints (set_pipeline's use_recompute is False); model: embed 96, depths [2,2,6,2], heads
[3,6,12,24], window 7, MLP ratio 4, qkv bias, patch norm, drop path 0.2 (linear over the blocks),
dropout 0, mixup and label smoothing on the host, so the targets are soft (SoftTargetCrossEntropy).
models/swin_transformer.py's IPU path: shifted windows by slice + concat, windows padded from
49 to 56 tokens with masks (qkv_mask, mask0, mask1) and the relative position bias and shift
masks padded to 56 x 56, and the ``RemapCE`` custom op (a tile-layout remap, built from
custom_ops/remap_tensor_ce.cpp) where the model calls ``remap_tensor``. The figure is
train_swin.py's ``throughput``: the call's samples over the call's time (setOptimizer and the
call; data loading excluded). Run with POPVIZ_EMULATOR_ARCH=Bow. ``python h_swin_tiny.py noremap``
leaves the RemapCE ops out (a sensitivity check only: the figure ran them).
"""

import sys

import popart
import poptorch
import torch
from _common import batch, train_one_call
from torch import nn
from torch.nn import functional as F

MB, G, R = 4, 64, 4
EMBED, DEPTHS, HEADS, WINDOW = 96, (2, 2, 6, 2), (3, 6, 12, 24), 7
LAYERS_PER_IPU = [2, 3, 5, 2]
DROP_PATH = 0.2
N, NP = WINDOW * WINDOW, 56  # tokens per window, padded to a multiple of 8
REMAP = "noremap" not in sys.argv[1:]


def remap(x, fwd=8, bwd=0, fwd_clone=False, bwd_clone=False, fwd_after_matmul=False, bwd_after_matmul=False):
    """swin_transformer.py ``remap_tensor``: the RemapCE custom op."""
    if not REMAP:
        return x
    return poptorch.custom_op([x], "RemapCE", "ai.graphcore", 1, example_outputs=[x], attributes={
        "fwd_grain_size": fwd, "bwd_grain_size": bwd or fwd, "fwd_clone_layout": int(fwd_clone),
        "bwd_clone_layout": int(bwd_clone), "fwd_after_matmul": int(fwd_after_matmul),
        "bwd_after_matmul": int(bwd_after_matmul), "debug_str": ""})[0]


def pad_aligned(x, dim, grain=8, need_remap=True, bwd_after_matmul=False):
    """swin_transformer.py ``padding_aligned``: pad ``dim`` to a multiple of 8, then remap."""
    size = x.shape[dim]
    if size % 8:
        target = (size + 7) // 8 * 8
        rank = x.dim()
        pads = [0] * (2 * rank)
        pads[2 * (rank - 1 - dim % rank) + 1] = target - size
        x = F.pad(x, pads, "constant", 0.0)
        if dim % rank == rank - 1:
            return remap(x, target)
    return remap(x, grain, bwd_after_matmul=bwd_after_matmul) if need_remap else x


class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        keep = 1.0 - self.p
        mask = torch.bernoulli(torch.full((x.shape[0],) + (1,) * (x.dim() - 1), keep, dtype=x.dtype))
        return x / keep * mask


class WindowAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.dim, self.heads, self.scale = dim, heads, (dim // heads) ** -0.5
        self.table = nn.Parameter(torch.zeros((2 * WINDOW - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(WINDOW), torch.arange(WINDOW), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (WINDOW - 1)
        self.register_buffer("index", rel[:, :, 0] * (2 * WINDOW - 1) + rel[:, :, 1])
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.qkv_mask = torch.cat([torch.ones(N, 3 * dim), torch.zeros(NP - N, 3 * dim)])
        self.mask0 = torch.cat([torch.cat([torch.zeros(N, N), torch.full((N, NP - N), -65450.0)], -1),
                                torch.zeros(NP - N, NP)], -2)
        self.mask1 = torch.cat([torch.cat([torch.ones(N, N), torch.zeros(N, NP - N)], -1), torch.zeros(NP - N, NP)], -2)

    def forward(self, x, mask=None):
        b, n, c = x.shape
        x = pad_aligned(x, -2, 16, bwd_after_matmul=True)
        qkv = remap(self.qkv(x), 16, fwd_after_matmul=True) * self.qkv_mask
        qkv = remap(qkv, 16, 16, True, False, bwd_after_matmul=True)
        qkv = remap(qkv.reshape(b, NP, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4), 16, 16, False, True)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = remap(q * torch.tensor(self.scale), 16, fwd_clone=True, bwd_after_matmul=True)
        attn = remap(q @ k.transpose(-2, -1), NP, fwd_after_matmul=True)
        bias = self.table[self.index.view(-1)].view(N, N, -1).permute(2, 0, 1).contiguous()
        attn = attn + pad_aligned(pad_aligned(bias, -1), -2, NP).unsqueeze(0)
        if mask is not None:
            mask = pad_aligned(pad_aligned(mask, -1), -2, NP)
            nw = mask.shape[0]
            attn = attn.view(b // nw, nw, self.heads, NP, NP) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, NP, NP)
        attn = torch.softmax(attn + self.mask0, dim=-1) * self.mask1
        attn = remap(attn, NP, NP, True, False, bwd_after_matmul=True)
        x = self.proj((attn @ v).transpose(1, 2).reshape(b, -1, c))
        return remap(x, 16, fwd_after_matmul=True)[:, :n, :]


class SwinBlock(nn.Module):
    def __init__(self, dim, resolution, heads, shift, drop_path):
        super().__init__()
        self.resolution, self.shift = resolution, 0 if resolution <= WINDOW else shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        mask = None
        if self.shift:
            img = torch.zeros(1, resolution, resolution, 1)
            cnt = 0
            for h in (slice(0, -WINDOW), slice(-WINDOW, -self.shift), slice(-self.shift, None)):
                for w in (slice(0, -WINDOW), slice(-WINDOW, -self.shift), slice(-self.shift, None)):
                    img[:, h, w, :] = cnt
                    cnt += 1
            win = self._partition(img, False).view(-1, N)
            mask = win.unsqueeze(1) - win.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        self.register_buffer("attn_mask", mask)

    @staticmethod
    def _partition(x, use_remap=True):
        b, h, w, c = x.shape
        x = x.view(b, h // WINDOW, WINDOW, w // WINDOW, WINDOW, c).permute(0, 1, 3, 2, 4, 5)
        return (remap(x, 16) if use_remap else x.contiguous()).reshape(-1, WINDOW, WINDOW, c)

    @staticmethod
    def _roll(x, s):  # the IPU path's shift: slices and concatenations
        x = torch.cat([x[:, s:], x[:, :s]], dim=1)
        return torch.cat([x[:, :, s:], x[:, :, :s]], dim=2)

    def forward(self, x):
        r, (b, _, c) = self.resolution, x.shape
        shortcut = x
        x = self.norm1(x).view(b, r, r, c)
        if self.shift:
            x = remap(self._roll(x, self.shift), 16)
        windows = self.attn(self._partition(x).view(-1, N, c), mask=self.attn_mask).view(-1, WINDOW, WINDOW, c)
        x = windows.view(b, r // WINDOW, r // WINDOW, WINDOW, WINDOW, -1).permute(0, 1, 3, 2, 4, 5)
        x = remap(x, 16).reshape(b, r, r, -1)  # window_reverse
        if self.shift:
            x = self._roll(x, r - self.shift)
        x = shortcut + self.drop_path(remap(x, 16).view(b, r * r, c))
        y = remap(self.norm2(x), 16, 16, True, False, bwd_after_matmul=True)
        y = remap(self.fc2(F.gelu(self.fc1(y))), 16, fwd_after_matmul=True)
        return x + self.drop_path(y)


class PatchMerging(nn.Module):
    def __init__(self, dim, resolution):
        super().__init__()
        self.resolution = resolution
        self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        b, _, c = x.shape
        r = self.resolution
        x = x.view(b, r // 2, 2, r // 2, 2, c).transpose(2, 3).transpose(3, 4).reshape(b, -1, 4 * c)
        return self.reduction(self.norm(remap(x, 16)))


class SwinTiny(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, EMBED, 4, 4)
        self.patch_norm = nn.LayerNorm(EMBED)
        rates = torch.linspace(0, DROP_PATH, sum(DEPTHS)).tolist()
        ipu_of = [ipu for ipu, n in enumerate(LAYERS_PER_IPU) for _ in range(n)]
        self.stages, self.merges, i = nn.ModuleList(), nn.ModuleList(), 0
        for s, (depth, heads) in enumerate(zip(DEPTHS, HEADS, strict=True)):
            dim, res = EMBED * 2 ** s, 56 // 2 ** s
            blocks = nn.ModuleList()
            for j in range(depth):
                block = SwinBlock(dim, res, heads, 0 if j % 2 == 0 else WINDOW // 2, rates[i])
                blocks.append(poptorch.BeginBlock(block, f"layer_{s}_block{j}", ipu_id=ipu_of[i]))
                i += 1
            self.stages.append(blocks)
            self.merges.append(PatchMerging(dim, res) if s < len(DEPTHS) - 1 else nn.Identity())
        self.norm = nn.LayerNorm(EMBED * 8)
        self.head = nn.Linear(EMBED * 8, classes)

    def forward(self, images, targets):
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = self.patch_norm(remap(x, 16))
        for blocks, merge in zip(self.stages, self.merges, strict=True):
            for block in blocks:
                x = block(remap(x, 16))
            x = merge(x)
        x = F.adaptive_avg_pool1d(self.norm(x).transpose(1, 2), 1).flatten(1)
        logits = self.head(x)
        loss = torch.sum(-targets.float() * F.log_softmax(logits.float(), dim=-1), dim=-1).mean()
        return logits, poptorch.identity_loss(loss, "none")


opts = poptorch.Options().replicationFactor(R).autoRoundNumIPUs(True).deviceIterations(1)
opts.Training.gradientAccumulation(G)
opts.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Mean)
opts._Popart.set("defaultBufferingDepth", 3)
opts.randomSeed(0)
opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
opts.setAvailableMemoryProportion({f"IPU{i}": 0.12 for i in range(len(LAYERS_PER_IPU))})
opts.Precision.enableStochasticRounding(True)
opts.Precision.setPartialsType(torch.float32)
opts._Popart.set("accumulateOuterFragmentSettings.schedule",
                 int(popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized))
opts._Popart.set("subgraphCopyingStrategy", int(popart.SubgraphCopyingStrategy.JustInTime))
opts._Popart.set("scheduleNonWeightUpdateGradientConsumersEarly", True)
opts._Popart.setPatterns({"TiedGather": True, "TiedGatherAccumulate": True, "UpdateInplacePrioritiesForIpu": True})

model = SwinTiny()
decay = [p for n, p in model.named_parameters() if p.dim() > 1 and "table" not in n]
no_decay = [p for n, p in model.named_parameters() if p.dim() == 1 or "table" in n]
optimizer = poptorch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=0.001,
                                 betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05, loss_scaling=1024,
                                 accum_type=torch.float32, first_order_momentum_accum_type=torch.float16,
                                 second_order_momentum_accum_type=torch.float32, max_grad_norm=5.0)
n = MB * G * R
train_one_call(model, opts, optimizer, batch(3, 224, 224, total=n), batch(1000, total=n))
