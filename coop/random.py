"""Counter-based random numbers for random kernels: Philox-4x32-10 (Salmon, Moraes, Dror and
Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011; Random123's known answers).

The stream keyed by a 64-bit seed is a pure function of (seed, index): word m is lane m % 4 of
``philox4x32_10(counter=(b mod 2**32, b >> 32, 0, 0), key=(seed mod 2**32, seed >> 32))`` with
b = m // 4. NumPy computes it with uint32/uint64 array arithmetic, CuPy with one elementwise
kernel doing the same integer operations, so both give the same bits. A random kernel's
``rng`` (a Stream) keeps only a Python int, the next block: recomputing an op draws the same
numbers and allocates no generator state (CuPy's ``default_rng`` builds about 13 MB of curand
states on an H200 and runs curand_init on each).

Uniforms from words w, exact (every step is exact in the target type, so no rounding mode or
fused multiply-add can change a bit):

- float32: ``(w >> 8) * 2**-24``: 24 bits, in [0, 1).
- float64: ``((w0 >> 5) * 2**26 + (w1 >> 6)) * 2**-53`` from two consecutive words w0, w1:
  53 bits, in [0, 1) (NumPy's and MT19937's res53 mapping).
"""
import sys

import numpy

#: Philox-4x32's multipliers and Weyl key increments (Random123's philox.h)
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10    # even: the in-place rounds leave each lane in its own column
_MASK32 = 0xFFFFFFFF
#: where a uint64's low and high 32-bit halves sit when viewed as two uint32
_LO, _HI = (0, 1) if sys.byteorder == "little" else (1, 0)
_WORDS_PER_BLOCK = 4
_WORDS = {numpy.dtype(numpy.uint32): 1, numpy.dtype(numpy.float32): 1,
          numpy.dtype(numpy.float64): 2}


def philox4x32_10(state, k0, k1):
    """Philox-4x32-10 of each row of state (an (n, 4) uint32 array: counters c0..c3) under the
    key (k0, k1) (ints below 2**32), in place, with two uint64 scratch arrays: returns state."""
    u32, u64 = numpy.uint32, numpy.uint64
    p0, p1 = numpy.empty(len(state), u64), numpy.empty(len(state), u64)
    h0, h1 = p0[:, None].view(u32), p1[:, None].view(u32)    # (n, 2): the products' halves
    c = [state[:, lane] for lane in range(4)]
    k0, k1 = int(k0), int(k1)
    for _ in range(ROUNDS):
        numpy.multiply(c[0], u64(M0), out=p0)
        numpy.multiply(c[2], u64(M1), out=p1)
        numpy.bitwise_xor(c[1], h1[:, _HI], out=c[1])        # c1 ^ hi(M1 c2) ^ k0: the new c0
        c[1] ^= u32(k0)
        numpy.bitwise_xor(c[3], h0[:, _HI], out=c[3])        # c3 ^ hi(M0 c0) ^ k1: the new c2
        c[3] ^= u32(k1)
        numpy.copyto(c[0], h1[:, _LO])                       # lo(M1 c2): the new c1
        numpy.copyto(c[2], h0[:, _LO])                       # lo(M0 c0): the new c3
        c = [c[1], c[0], c[3], c[2]]     # lanes trade columns; after an even count, back home
        k0, k1 = (k0 + W0) & _MASK32, (k1 + W1) & _MASK32
    return state


def words(seed, block, nblocks):
    """The stream's words from block `block` on, nblocks * 4 of them, as a uint32 array (NumPy)."""
    state = numpy.zeros((nblocks, _WORDS_PER_BLOCK), dtype=numpy.uint32)
    b = numpy.arange(block, block + nblocks, dtype=numpy.uint64)
    state[:, 0] = b & numpy.uint64(_MASK32)
    state[:, 1] = b >> numpy.uint64(32)
    del b
    return philox4x32_10(state, seed & _MASK32, seed >> 32).reshape(-1)


def _uniform(w, dtype):
    """Words as the documented uniforms of dtype (NumPy)."""
    if dtype == numpy.uint32:
        return w
    if dtype == numpy.float32:
        w >>= numpy.uint32(8)
        out = w.astype(numpy.float32)
        out *= numpy.float32(2.0 ** -24)
        return out
    out = (w[0::2] >> numpy.uint32(5)).astype(numpy.float64)
    out *= 2.0 ** 26
    out += w[1::2] >> numpy.uint32(6)
    out *= 2.0 ** -53
    return out


class Stream:
    """A random kernel's ``rng``: draws from the Philox stream of one seed, on NumPy or CuPy.

    Every draw starts at the next whole block of 4 words, so draw k of a kernel reads the same
    words on every run; the stream holds nothing but that block number.
    """

    __slots__ = ("seed", "xp", "block")

    def __init__(self, seed, xp=numpy):
        seed = int(seed)
        if not 0 <= seed < 2 ** 64:
            raise ValueError(f"a Philox stream's seed is a 64-bit key: 0 <= seed < 2**64, got {seed}")
        self.seed = seed
        self.xp = xp
        self.block = 0    # the block the next draw starts at

    def random(self, size=None, dtype=numpy.float64):
        """Uniforms in [0, 1) of dtype float32 or float64 (the module's mapping), shape size."""
        return self._draw(size, dtype)

    def bits(self, size=None):
        """Raw uint32 words of the stream, shape size."""
        return self._draw(size, numpy.uint32)

    def generator(self):
        """The array module's stateful Generator seeded by this stream's seed, for distributions
        the stream does not offer (on CuPy it allocates and initialises curand states)."""
        return self.xp.random.default_rng(self.seed)

    def _draw(self, size, dtype):
        dtype = numpy.dtype(dtype)
        if dtype not in _WORDS:
            raise TypeError(f"Philox streams draw uint32, float32 or float64, not {dtype}")
        shape = () if size is None else tuple(numpy.atleast_1d(size).tolist())
        n = int(numpy.prod(shape, dtype=numpy.int64))
        nblocks = -(-n * _WORDS[dtype] // _WORDS_PER_BLOCK)
        block, self.block = self.block, self.block + nblocks
        if self.xp is numpy:
            return _uniform(words(self.seed, block, nblocks)[:n * _WORDS[dtype]], dtype).reshape(shape)
        out = self.xp.empty(shape, dtype=dtype)
        if n:
            cupy_kernel()(block, self.seed & _MASK32, self.seed >> 32, out)
        return out


# ---- CuPy: one elementwise kernel over the output, the same arithmetic ------------------------

#: device functions: Philox-4x32-10 and the uniform mappings (the module docstring's)
CUDA_PREAMBLE = r"""
__device__ void coop_philox4x32_10(unsigned int* c, unsigned int k0, unsigned int k1) {
    for (int r = 0; r < 10; ++r) {
        const unsigned int hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        const unsigned int hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        const unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
}
template <typename T> __device__ T coop_uniform(const unsigned int* w, int lane);
template <> __device__ unsigned int coop_uniform<unsigned int>(const unsigned int* w, int lane) {
    return w[lane];
}
template <> __device__ float coop_uniform<float>(const unsigned int* w, int lane) {
    return (float)(w[lane] >> 8) * 5.9604644775390625e-08f;
}
template <> __device__ double coop_uniform<double>(const unsigned int* w, int lane) {
    return ((double)(w[2 * lane] >> 5) * 67108864.0 + (double)(w[2 * lane + 1] >> 6))
           * 1.1102230246251565e-16;
}
"""
#: the kernel's body: element i of a draw starting at block `block` (T: the output's type)
CUDA_BODY = r"""
const int per_block = sizeof(T) == 8 ? 2 : 4;
const unsigned long long b = block + (unsigned long long)(i / per_block);
unsigned int w[4] = {(unsigned int)b, (unsigned int)(b >> 32), 0u, 0u};
coop_philox4x32_10(w, k0, k1);
out = coop_uniform<T>(w, (int)(i % per_block));
"""
_kernel = None


def cupy_kernel():
    """The CuPy elementwise kernel (block, k0, k1, out), built on first use."""
    global _kernel
    if _kernel is None:
        import cupy
        _kernel = cupy.ElementwiseKernel("uint64 block, uint32 k0, uint32 k1", "T out", CUDA_BODY,
                                         "coop_philox_draw", preamble=CUDA_PREAMBLE)
    return _kernel
