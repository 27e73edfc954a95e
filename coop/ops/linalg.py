"""Matrix products: matmul of 2-D operands ("matmul") and batched, with NumPy's broadcasting of
the leading dims ("batch_matmul"); both EXPENSIVE in the paper's table.

The kernels take transpose flags, so backward multiplies by a transposed operand without a
separate transpose op.
"""
import numpy

from coop.autograd.tape import record
from coop.ops._common import check_tensors, numel, op_kernel
from coop.ops.shape import reshape


def _matmul_fn(a, b, xp, transpose_a=False, transpose_b=False):
    return xp.matmul(a.swapaxes(-1, -2) if transpose_a else a,
                     b.swapaxes(-1, -2) if transpose_b else b)


def _operands(a, b, transpose_a=False, transpose_b=False):
    sa, sb = a[0], b[0]
    if transpose_a:
        sa = sa[:-2] + (sa[-1], sa[-2])
    if transpose_b:
        sb = sb[:-2] + (sb[-1], sb[-2])
    if sa[-1] != sb[-2]:
        raise ValueError(f"matmul: shapes {a[0]} and {b[0]} do not match"
                         f"{' (transposed)' if transpose_a or transpose_b else ''}")
    return numpy.broadcast_shapes(sa[:-2], sb[:-2]), sa[-2], sa[-1], sb[-1]


def _matmul_rule(a, b, **flags):
    lead, m, _, n = _operands(a, b, **flags)
    return lead + (m, n), numpy.result_type(a[1], b[1])


def _matmul_flops(a, b, **flags):
    lead, m, k, n = _operands(a, b, **flags)
    return 2.0 * numel(lead) * m * k * n


MATMUL = op_kernel(_matmul_fn, name="matmul", shape=_matmul_rule, flops=_matmul_flops)
BATCH_MATMUL = op_kernel(_matmul_fn, name="batch_matmul", shape=_matmul_rule, flops=_matmul_flops)


def _product(a, b, transpose_a=False, transpose_b=False):
    kernel = MATMUL if a.ndim == 2 and b.ndim == 2 else BATCH_MATMUL
    return kernel(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def _matmul_backward(node, g):
    a, b = node.saved
    ga = gb = None
    if node.needs[0]:
        ga = _product(g, b, transpose_b=True)          # broadcast dims: summed by the engine
    if node.needs[1]:
        if b.ndim == 2 and a.ndim > 2:
            # fold a's batch into rows: one 2-D product, no (batch, K, N) temporary to sum
            gb = _product(reshape(a, (-1, a.shape[-1])), reshape(g, (-1, g.shape[-1])),
                          transpose_a=True)
        else:
            gb = _product(a, g, transpose_a=True)
    return ga, gb


def matmul(a, b):
    """a @ b for operands of 2 or more dims, broadcasting the leading (batch) dims."""
    check_tensors("matmul", a, b)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul needs operands of 2 or more dims, got shapes {a.shape} and "
                         f"{b.shape}; reshape vectors to (1, n) or (n, 1)")
    _operands((a.shape, a.dtype), (b.shape, b.dtype))   # raises on a mismatch
    return record(_product(a, b), (a, b), _matmul_backward, saved=(a, b), name="matmul")
