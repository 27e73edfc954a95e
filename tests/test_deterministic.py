"""Ops whose CuPy implementation would use atomics add in one fixed order instead: the
embedding's backward (coop.ops._common.index_add) groups positions by a stable sort and adds
each group in position order, as NumPy's add.at does, so both backends give the same bits."""
import numpy as np
import pytest

import coop
from _nvrtc import compile_elementwise
from _training import train_tiny_gpt
from coop import ops
from coop.ops._common import INDEX_ADD_BODY, index_add, index_groups


def grouped_sums(indices, values, num):
    """What the CuPy kernel computes, element by element: each output row adds its group's
    rows in the order index_groups gives (NumPy arrays, Python loops)."""
    order, bounds = index_groups(np, indices, num)
    width = int(np.prod(values.shape[indices.ndim:]))
    rows = values.reshape(order.size, width)
    out = np.zeros((num, width), dtype=values.dtype)
    for v in range(num):
        for d in range(rows.shape[1]):
            acc = values.dtype.type(0)
            for p in order[bounds[v]:bounds[v + 1]]:
                acc = values.dtype.type(acc + rows[p, d])
            out[v, d] = acc
    return out.reshape((num,) + values.shape[indices.ndim:])


def add_at(indices, values, num):
    out = np.zeros((num,) + values.shape[indices.ndim:], dtype=values.dtype)
    np.add.at(out, indices, values)
    return out


CASES = {   # (indices, trailing shape, num)
    "repeats, 2-d indices": (np.array([[1, 3, 1, 1], [0, 3, 3, 1]]), (5,), 6),
    "negative indices": (np.array([-1, 2, 5, -6, 0, 5]), (3,), 6),
    "one index only": (np.full(50, 2), (4,), 3),
    "scalar rows": (np.array([0, 1, 0, 2, 2, 2]), (), 4),
    "empty": (np.zeros((0,), dtype=np.int64), (3,), 2),
    "int32 indices, 2-d rows": (np.array([3, 0, 3], dtype=np.int32), (2, 2), 4),
}


@pytest.mark.parametrize("case", CASES)
def test_grouping_adds_in_add_ats_order_bit_for_bit(case):
    indices, trailing, num = CASES[case]
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        scale = 10 ** rng.uniform(-3, 3)
        values = (rng.standard_normal(indices.shape + trailing) * scale).astype(dtype)
        want = add_at(indices, values, num)
        got = grouped_sums(indices, values, num)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
        assert index_add(np, indices, values, num).tobytes() == want.tobytes()


def test_index_add_is_exact_on_integer_values_and_agrees_with_add_at_on_random_data():
    rng = np.random.default_rng(0)
    indices = rng.integers(0, 40, (16, 64))          # about 26 repeats per index
    values = rng.integers(-1000, 1000, (16, 64, 8)).astype(np.float64)
    exact = np.zeros((40, 8))
    for (b, t), v in np.ndenumerate(indices):
        exact[v] += values[b, t]                     # integers: every order gives these bits
    np.testing.assert_array_equal(index_add(np, indices, values, 40), exact)
    np.testing.assert_array_equal(grouped_sums(indices, values, 40), exact)
    noisy = rng.standard_normal((16, 64, 8)).astype(np.float32)
    one_hot = np.eye(40)[indices]                    # a float64 matmul: another order
    np.testing.assert_allclose(grouped_sums(indices, noisy, 40),
                               np.einsum("btv,btd->vd", one_hot, noisy.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)


def test_index_groups_are_stable_and_bounded():
    indices = np.array([[2, 0, 2], [1, 2, -1]])
    order, bounds = index_groups(np, indices, 4)
    assert order.tolist() == [1, 3, 0, 2, 4, 5] and bounds.tolist() == [0, 1, 2, 5, 6]


@pytest.mark.parametrize("ctype", ["float", "double"])
def test_the_cupy_index_add_kernels_source_compiles(ctype):
    ptx = compile_elementwise("", INDEX_ADD_BODY.replace("rows[", "rows_[")
                              .replace("order[", "order_[").replace("bounds[", "bounds_["),
                              "const T* rows_, const long long* order_, const long long* bounds_, "
                              "long long width", ctype)
    assert ".entry k" in ptx


def test_the_embeddings_gradient_accumulates_in_position_order(make_rt):
    rt = make_rt("1MiB")
    rng = np.random.default_rng(1)
    weight = rt.tensor(rng.standard_normal((7, 5)).astype(np.float32), requires_grad=True)
    idx = rng.integers(0, 7, (6, 9))
    out = ops.embedding(weight, rt.tensor(idx))
    g = rng.standard_normal((6, 9, 5)).astype(np.float32)
    ops.sum(ops.mul(out, rt.tensor(g))).backward()
    assert weight.grad.numpy().tobytes() == add_at(idx, g, 7).tobytes()


# ---- on a device --------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("case", CASES)
def test_cupy_index_add_gives_numpys_bits_every_run(case):
    import cupy
    indices, trailing, num = CASES[case]
    values = np.random.default_rng(2).standard_normal(indices.shape + trailing).astype(np.float32)
    want = add_at(indices, values, num)
    runs = [cupy.asnumpy(index_add(cupy, cupy.asarray(indices), cupy.asarray(values), num))
            for _ in range(3)]
    for got in runs:
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.cuda
def test_a_gpt_on_the_device_trains_bit_identically_under_a_budget():
    """A tiny GPT with dropout (Philox) and an embedding (ordered index_add), 3 AdamW steps on
    CuPy: at a budget that evicts, losses and parameters equal the unlimited run's bits; and
    with each parameter updated inside the backward pass (Optimizer.backward_step), unlimited
    and at that budget, the same bits again."""

    def train(budget, in_backward=False):
        rt = coop.Runtime(coop.allocator(budget), policy="coop", cost="h200")
        return train_tiny_gpt(rt, lambda params: coop.optim.AdamW(params, lr=1e-2), in_backward)

    losses, state, stats = train("256MiB")      # conftest restores CuPy's allocator after
    # 0.7 of the peak: at 0.6 and below this tiny model's first step cannot hold one GELU
    # backward's temporaries beside its constants (the host backend fails there alike)
    small = int(0.7 * stats["peak_used_bytes"])
    for budget, in_backward in ((small, False), ("256MiB", True), (small, True)):
        got, got_state, got_stats = train(budget, in_backward)
        assert got == losses
        for name, value in state.items():
            np.testing.assert_array_equal(got_state[name], value, err_msg=name)
        assert (got_stats["recomputes"] > 0) == (budget == small)
