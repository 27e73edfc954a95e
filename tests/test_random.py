"""coop.random: Philox-4x32-10 against Random123's known answers and a scalar reference, the
stream's layout and uniform mappings, the CuPy kernel's source (compiled by NVRTC, no device
needed) and, on a device, its bits against NumPy's; random kernels replay bit for bit."""
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import _philox_reference as reference
import coop
from _nvrtc import compile_elementwise
from coop import ops
from coop.random import (CUDA_BODY, CUDA_PREAMBLE, M0, M1, W0, W1, Stream, draw,
                         philox4x32_10)

CHUNK = reference.CHUNK    # the NumPy reference's chunk of blocks

# Random123 tests/kat_vectors, "philox4x32 10" lines: counter (4 words), key (2), output (4)
KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), (0xffffffff, 0xffffffff),
     (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


def scalar_philox(c, k):
    """Philox-4x32-10 on Python ints, written from the paper's round function."""
    c, (k0, k1) = list(c), k
    for _ in range(10):
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k1, p0 & 0xFFFFFFFF]
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return c


def scalar_word(seed, m):
    """Word m of seed's stream, by the definition in coop.random's docstring."""
    b = m // 4
    return scalar_philox((b & 0xFFFFFFFF, b >> 32, 0, 0), (seed & 0xFFFFFFFF, seed >> 32))[m % 4]


@pytest.mark.parametrize("counter, key, expected", KAT)
def test_philox_gives_random123s_known_answers(counter, key, expected):
    assert philox4x32_10(np.array([counter]), *key)[0].tolist() == list(expected)
    assert scalar_philox(counter, key) == list(expected)


def test_vectorised_philox_matches_the_scalar_reference_on_random_counters_and_keys():
    rng = np.random.default_rng(7)
    counters = rng.integers(0, 2 ** 32, (64, 4), dtype=np.uint64)
    for k0, k1 in rng.integers(0, 2 ** 32, (4, 2)).tolist():
        got = philox4x32_10(counters, k0, k1)
        assert got.dtype == np.uint32 and got.shape == (64, 4)
        assert got.tolist() == [scalar_philox(c, (k0, k1)) for c in counters.tolist()]


# ---- the compiled host path against the pure-NumPy reference ------------------------------------

WORDS = {np.uint32: 1, np.float32: 1, np.float64: 2}


@st.composite
def draws(draw_, max_n=3 * 4 * CHUNK):
    """(seed, block, n, dtype): any 64-bit seed; blocks near 0, the 2**32 carry and the top of
    the 64-bit counter (the last draw the API allows ends at block 2**64); n small or large."""
    dtype = draw_(st.sampled_from(list(WORDS)))
    n = draw_(st.one_of(st.integers(0, 9), st.integers(0, max_n)))
    nblocks = -(-n * WORDS[dtype] // 4)
    block = draw_(st.one_of(
        st.integers(0, 2 ** 20),
        st.integers(2 ** 32 - nblocks - 3, 2 ** 32 + 3).filter(lambda b: b >= 0),
        st.integers(2 ** 64 - nblocks - 5, 2 ** 64 - nblocks),
        st.integers(0, 2 ** 64 - nblocks)))
    return draw_(st.integers(0, 2 ** 64 - 1)), block, n, dtype


@settings(max_examples=300, deadline=None)
@given(draws())
def test_compiled_draws_equal_the_numpy_reference_bit_for_bit(args):
    seed, block, n, dtype = args
    got, want = draw(seed, block, n, dtype), reference.draw(seed, block, n, dtype)
    assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape == (n,)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 4 * CHUNK + 1])
@pytest.mark.parametrize("dtype", list(WORDS))
def test_compiled_draws_equal_the_reference_at_every_partial_block(n, dtype):
    for seed, block in [(0, 0), (2 ** 64 - 1, 2 ** 32 - 1), (2 ** 63 + 5, 2 ** 64 - 2 * n - 1)]:
        assert draw(seed, block, n, dtype).tobytes() == \
            reference.draw(seed, block, n, dtype).tobytes()


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1), st.integers(0, 40),
       st.integers(0, 2 ** 32))
def test_compiled_philox_equals_the_numpy_reference(k0, k1, rows, seed):
    counters = np.random.default_rng(seed).integers(0, 2 ** 32, (rows, 4), dtype=np.uint64)
    got = philox4x32_10(counters, k0, k1)
    assert got.dtype == np.uint32 and got.shape == (rows, 4)
    assert got.tobytes() == reference.philox4x32_10(counters, k0, k1).tobytes()


@pytest.mark.parametrize("dtype", list(WORDS))
def test_a_host_draw_allocates_its_output_only(dtype):
    n = 1 << 18
    draw(1, 0, n, dtype)
    tracemalloc.start()
    try:
        out = draw(7, 3, n, dtype)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.nbytes <= peak < out.nbytes + 4096


def test_bad_draws_are_refused():
    with pytest.raises(ValueError, match="blocks"):
        draw(1, 2 ** 64 - 1, 8, np.uint32)          # its 2 blocks would pass 2**64
    with pytest.raises(ValueError, match="2\\*\\*64"):
        draw(2 ** 64, 0, 4, np.uint32)
    with pytest.raises(ValueError, match="blocks"):
        draw(1, -1, 4, np.uint32)
    with pytest.raises(TypeError, match="uint32, float32 or float64"):
        draw(1, 0, 4, np.int32)
    assert draw(1, 2 ** 64 - 1, 4, np.uint32).tolist() == \
        [scalar_word(1, 4 * (2 ** 64 - 1) + i) for i in range(4)]


@pytest.mark.parametrize("seed, block", [(0, 0), (2 ** 64 - 1, 2 ** 32 - 3), (12345, 7)])
def test_stream_words_are_the_documented_function_of_seed_and_index(seed, block):
    nblocks = CHUNK + 5                     # crosses chunk boundaries (and 2**32 for one case)
    got = draw(seed, block, 4 * nblocks, np.uint32)
    assert got.dtype == np.uint32 and got.shape == (4 * nblocks,)
    for i in [0, 1, 2, 3, 4, 4 * CHUNK - 1, 4 * CHUNK, 4 * nblocks - 1, 4 * 3 + 2, 4 * 8 + 1]:
        assert int(got[i]) == scalar_word(seed, 4 * block + i), i


def test_uniforms_follow_the_exact_mappings():
    w = draw(99, 0, 32, np.uint32)
    s = Stream(99)
    f32 = s.random(5, dtype=np.float32)            # words 0..4, then the next block
    f64 = s.random((2, 3), dtype=np.float64)       # word pairs from block 2
    bits = s.bits(3)                               # block 4 (6 doubles took 3 blocks: 2..4)
    assert f32.dtype == np.float32 and f64.dtype == np.float64 and bits.dtype == np.uint32
    np.testing.assert_array_equal(f32, [np.float32(int(x) >> 8) * np.float32(2 ** -24)
                                        for x in w[:5]])
    pairs = w[8:20].astype(np.int64).reshape(6, 2)
    np.testing.assert_array_equal(
        f64.reshape(-1), [((a >> 5) * 2 ** 26 + (b >> 6)) * 2.0 ** -53 for a, b in pairs.tolist()])
    np.testing.assert_array_equal(bits, [scalar_word(99, 4 * 5 + i) for i in range(3)])
    assert s.block == 6


def test_uniforms_lie_in_the_unit_interval_and_look_uniform():
    u32 = Stream(3).random(200_000, dtype=np.float32)
    u64 = Stream(3).random(200_000)
    for u in (u32, u64):
        assert u.min() >= 0 and u.max() < 1
        assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
        counts = np.histogram(u, bins=20, range=(0, 1))[0]
        assert counts.min() > 0.9 * len(u) / 20
    assert Stream(2 ** 64 - 1).random(2 ** 20, dtype=np.float32).max() < 1   # top bits set


def test_same_seed_same_draws_and_draws_do_not_overlap():
    a, b = Stream(5), Stream(5)
    first = [a.random(10), a.random(3, dtype=np.float32), a.bits(4)]
    second = [b.random(10), b.random(3, dtype=np.float32), b.bits(4)]
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(Stream(5).random(10), Stream(6).random(10))
    assert Stream(5).random() .shape == () and Stream(5).random(0).shape == (0,)
    np.testing.assert_array_equal(Stream(5).generator().random(4),
                                  np.random.default_rng(5).random(4))


def test_bad_seeds_and_dtypes_are_refused():
    with pytest.raises(ValueError, match="64-bit key"):
        Stream(-1)
    with pytest.raises(ValueError, match="64-bit key"):
        Stream(2 ** 64)
    with pytest.raises(TypeError, match="uint32, float32 or float64"):
        Stream(1).random(3, dtype=np.float16)


# ---- the CuPy kernel ----------------------------------------------------------------------------


@pytest.mark.parametrize("ctype", ["unsigned int", "float", "double"])
def test_the_cupy_kernels_source_compiles(ctype):
    params = "unsigned long long first_block, unsigned int k0, unsigned int k1"
    ptx = compile_elementwise(CUDA_PREAMBLE, CUDA_BODY, params, ctype)
    assert ".entry k" in ptx


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.uint32, np.float32, np.float64])
def test_cupy_draws_the_same_bits_as_numpy(dtype):
    import cupy
    host, device = Stream(2 ** 63 + 11), Stream(2 ** 63 + 11, cupy)
    host.block = device.block = 2 ** 32 - 2                      # the counter's carry too
    for shape in [(7,), (3, 5), (4 * CHUNK + 3,), ()]:
        want = host.random(shape, dtype) if dtype != np.uint32 else host.bits(shape)
        got = device.random(shape, dtype) if dtype != np.uint32 else device.bits(shape)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(cupy.asnumpy(got), want)
        assert cupy.asnumpy(got).tobytes() == want.tobytes()
    assert host.block == device.block


@pytest.mark.cuda
def test_a_cupy_draw_allocates_its_output_only():
    import cupy
    pool = cupy.get_default_memory_pool()
    Stream(1, cupy).random(1000, dtype=np.float32)               # compile first
    pool.free_all_blocks()
    before = pool.total_bytes()
    out = Stream(2, cupy).random(1 << 20, dtype=np.float32)
    assert pool.total_bytes() - before == out.nbytes


# ---- random kernels in the runtime --------------------------------------------------------------


def test_a_random_kernel_gets_a_philox_stream_and_replays_every_draw(make_rt):
    rt = make_rt("1MiB")
    seen = []

    def noisy(a, rng):
        seen.append(rng)
        return a + rng.random(a.shape) + rng.random(a.shape, dtype=np.float32)

    kernel = coop.Kernel(noisy, name="noisy", random=True)
    x = rt.tensor(np.zeros((30, 40)))
    y = rt.apply(kernel, x)
    first = y.numpy()
    rt.evict(y)
    np.testing.assert_array_equal(y.numpy(), first)              # recomputed, bit for bit
    assert rt.stats()["recomputes"] == 1
    assert [type(s) for s in seen] == [Stream, Stream] and seen[0].seed == seen[1].seed
    key = int(np.random.SeedSequence([rt.seed, 0]).generate_state(1, np.uint64)[0])
    expected = Stream(key)
    np.testing.assert_array_equal(
        first, expected.random((30, 40)) + expected.random((30, 40), dtype=np.float32))
    z = rt.apply(kernel, x)                                      # the next random op: a new key
    assert seen[-1].seed != key and not np.array_equal(z.numpy(), first)


def test_dropouts_mask_is_the_documented_draw(make_rt):
    rt = make_rt("1MiB")
    x = rt.tensor(np.ones((50, 60), dtype=np.float32))
    y = ops.dropout(x, 0.25)
    key = int(np.random.SeedSequence([rt.seed, 0]).generate_state(1, np.uint64)[0])
    keep = Stream(key).random((50, 60), dtype=np.float32) >= np.float32(0.25)
    np.testing.assert_array_equal(y.numpy(), np.where(keep, np.float32(1 / 0.75), 0))
    assert y.numpy().dtype == np.float32


def test_dropout_under_a_budget_equals_unlimited_bit_for_bit(make_rt):
    """An MLP with dropout after every layer, trained 3 SGD steps: at a budget that evicts
    (and recomputes dropout outputs) losses and weights equal the unlimited run's bits."""
    def train(budget):
        rt = make_rt(budget)
        model = coop.models.MLP(rt, [32] + [64] * 4 + [10], dropout=0.2, rng=0)
        opt = coop.optim.SGD(model.parameters(), lr=0.1)
        rng = np.random.default_rng(0)
        x = rt.tensor(rng.standard_normal((128, 32)).astype(np.float32))
        targets = rng.integers(0, 10, 128)
        losses = []
        for _ in range(3):
            loss = model.loss(x, targets)
            losses.append(loss.numpy().item())
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad()
        return losses, model.state_dict(), rt.stats()

    losses, state, stats = train("64MiB")
    assert stats["recomputes"] == 0
    small, small_state, small_stats = train(int(0.8 * stats["peak_used_bytes"]))
    assert small_stats["recomputes"] > 0 and small_stats["evictions"] > 0
    assert small == losses
    for name, value in state.items():
        np.testing.assert_array_equal(small_state[name], value, err_msg=name)
