"""Counter-based random numbers for random kernels: Philox-4x32-10 (Salmon, Moraes, Dror and
Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011; Random123's known answers).

The stream keyed by a 64-bit seed is a pure function of (seed, index): word m is lane m % 4 of
``philox4x32_10(counter=(b mod 2**32, b >> 32, 0, 0), key=(seed mod 2**32, seed >> 32))`` with
b = m // 4. The host computes it with one compiled C loop over uint32/uint64 words
(coop._random), CuPy with one elementwise kernel doing the same integer operations, so both
give the same bits; neither allocates anything but the output. A random kernel's
``rng`` (a Stream) keeps only a Python int, the next block: recomputing an op draws the same
numbers and allocates no generator state (CuPy's ``default_rng`` builds about 13 MB of curand
states on an H200 and runs curand_init on each).

Uniforms from words w, exact (every step is exact in the target type, so no rounding mode or
fused multiply-add can change a bit):

- float32: ``(w >> 8) * 2**-24``: 24 bits, in [0, 1).
- float64: ``((w0 >> 5) * 2**26 + (w1 >> 6)) * 2**-53`` from two consecutive words w0, w1:
  53 bits, in [0, 1) (MT19937's genrand_res53, as NumPy's RandomState maps doubles).
"""
import numpy

from coop._random import fill, rounds

#: Philox-4x32's multipliers and Weyl key increments (Random123's philox.h)
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
_MASK32 = 0xFFFFFFFF
_WORDS_PER_BLOCK = 4
_WORDS = {numpy.dtype(numpy.uint32): 1, numpy.dtype(numpy.float32): 1,
          numpy.dtype(numpy.float64): 2}


def philox4x32_10(counters, k0, k1):
    """Philox-4x32-10 of each row of counters (an (n, 4) array of uint32 values c0..c3) under
    the key (k0, k1) (ints below 2**32): an (n, 4) uint32 array (NumPy)."""
    out = numpy.asarray(counters, dtype=numpy.uint64).reshape(-1, 4).astype(numpy.uint32)
    rounds(out, int(k0), int(k1))
    return out


def draw(seed, block, n, dtype):
    """n values of dtype (uint32, float32 or float64) from seed's stream, from block `block`
    on, by the module's mappings (NumPy): one compiled loop fills the output directly (no
    scratch: on coop's host backend the draw needs only its output in the arena)."""
    dtype = numpy.dtype(dtype)
    if dtype not in _WORDS:
        raise TypeError(f"Philox streams draw uint32, float32 or float64, not {dtype}")
    nblocks = -(-n * _WORDS[dtype] // _WORDS_PER_BLOCK)
    if not (0 <= seed < 2 ** 64 and 0 <= block and block + nblocks <= 2 ** 64):
        raise ValueError(f"a Philox draw needs 0 <= seed < 2**64 and its blocks "
                         f"[block, block + {nblocks}) within [0, 2**64), got seed {seed}, "
                         f"block {block}")
    out = numpy.empty(n, dtype=dtype)
    if n:                                        # an empty draw may start at block 2**64
        fill(out, seed, block)
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
            raise ValueError(f"a Philox stream's seed is a 64-bit key: 0 <= seed < 2**64, "
                             f"got {seed}")
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
            return draw(self.seed, block, n, dtype).reshape(shape)
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
#: the kernel's body: element i of a draw starting at block `first_block` (T: the output's type)
CUDA_BODY = r"""
const int per_block = sizeof(T) == 8 ? 2 : 4;
const unsigned long long b = first_block + (unsigned long long)(i / per_block);
unsigned int w[4] = {(unsigned int)b, (unsigned int)(b >> 32), 0u, 0u};
coop_philox4x32_10(w, k0, k1);
out = coop_uniform<T>(w, (int)(i % per_block));
"""
_kernel = None


def cupy_kernel():
    """The CuPy elementwise kernel (first_block, k0, k1, out), built on first use."""
    global _kernel
    if _kernel is None:
        import cupy
        _kernel = cupy.ElementwiseKernel("uint64 first_block, uint32 k0, uint32 k1", "T out",
                                         CUDA_BODY, "coop_philox_draw", preamble=CUDA_PREAMBLE)
    return _kernel
