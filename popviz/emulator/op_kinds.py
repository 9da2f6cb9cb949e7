"""Which kind of operation the cost model takes an operation for (the names PyTorch's dispatcher
gives them): products and convolutions run on the AMP units, normalisations and reductions in
several passes, gathers on the exchange, everything else elementwise. Split from
:mod:`popviz.emulator.costmodel`, which re-exports these names."""

from __future__ import annotations

from popviz.emulator.cost_inputs import OpCost

MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_dot_product_flash_attention",
                        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
                        "scaled_dot_product_attention"})
CONV_OPS = frozenset({"convolution", "_convolution", "conv2d", "conv1d", "conv3d", "cudnn_convolution",
                      "convolution_backward"})
NORM_SOFTMAX_OPS = frozenset({"native_layer_norm", "layer_norm", "native_batch_norm", "batch_norm",
                              "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                              "_native_batch_norm_legit_no_training", "native_group_norm", "group_norm",
                              "_softmax", "softmax", "_log_softmax", "log_softmax", "rms_norm", "_fused_rms_norm"})
REDUCTION_OPS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "std",
                           "var_mean", "std_mean", "norm", "linalg_vector_norm", "nll_loss_forward",
                           "nll_loss2d_forward", "mse_loss", "binary_cross_entropy_with_logits", "cumsum",
                           "prod", "logsumexp", "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d",
                           "adaptive_avg_pool2d", "max_pool2d", "topk", "sort"})
GATHER_OPS = frozenset({"embedding", "index_select", "gather", "index", "take_along_dim", "embedding_bag",
                        "_embedding_bag", "scatter", "scatter_add", "index_put", "index_add", "masked_select"})
OP_KINDS = ("matmul", "conv", "norm", "reduce", "gather", "elementwise")


def op_kind(op: OpCost) -> str:
    """The cost model's class of an operation: ``matmul`` / ``conv`` (FLOPs on the AMP units),
    ``norm`` (normalisations and softmax: several reductions and passes), ``reduce``, ``gather``
    (embeddings, indexing: exchange-bound) or ``elementwise`` (everything else, copies included)."""
    name = op.name.split(".")[0]
    if name in CONV_OPS:
        return "conv"
    if op.matmul and op.flops > 0:
        return "matmul"
    if name in NORM_SOFTMAX_OPS:
        return "norm"
    if name in REDUCTION_OPS:
        return "reduce"
    if name in GATHER_OPS:
        return "gather"
    return "elementwise"
