"""What BERT and Swin share: scaled dot-product attention over heads, composed of coop ops
(no mask beyond an additive bias), and the split of a projection into heads."""
import math

from coop import ops


def split_heads(x, n_heads):
    """(..., T, C) -> (..., H, T, C / H)."""
    *lead, length, channels = x.shape
    x = ops.reshape(x, (*lead, length, n_heads, channels // n_heads))
    n = len(lead)
    return ops.transpose(x, (*range(n), n + 1, n, n + 2))


def merge_heads(x):
    """(..., H, T, D) -> (..., T, H * D): the inverse of split_heads."""
    *lead, heads, length, depth = x.shape
    n = len(lead)
    x = ops.transpose(x, (*range(n), n + 1, n, n + 2))
    return ops.reshape(x, (*lead, length, heads * depth))


def attend(q, k, v, bias=None, dropout=None):
    """softmax(q k^T / sqrt(D) + bias) v for q, k, v (..., H, T, D); bias (a Tensor) broadcasts
    to the scores (..., H, T, T); dropout (a module or None) applies to the weights."""
    k_t = ops.transpose(k, (*range(k.ndim - 2), k.ndim - 1, k.ndim - 2))
    scores = ops.mul(ops.matmul(q, k_t), 1.0 / math.sqrt(q.shape[-1]))
    if bias is not None:
        scores = ops.add(scores, bias)
    weights = ops.softmax(scores)
    if dropout is not None:
        weights = dropout(weights)
    return ops.matmul(weights, v)
