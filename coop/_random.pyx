"""Philox-4x32-10 draws on the host: one C loop over the output's blocks (coop.random's
definitions; the arithmetic mirrors its CUDA kernel, mulhi through a 64-bit product).

Layer: beside coop.random (the face's random kernels); it imports nothing of coop.
"""
from libc.stdint cimport uint32_t, uint64_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    static inline void coop_philox4x32_10(uint32_t* c, uint32_t k0, uint32_t k1) {
        for (int r = 0; r < 10; ++r) {
            const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
            const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
            c[0] = n0; c[1] = (uint32_t)p1; c[2] = n2; c[3] = (uint32_t)p0;
            k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
        }
    }
    /* the words of the block counter (b mod 2**32, b >> 32, 0, 0) under the seed's key */
    static inline void coop_philox_block(uint32_t* w, uint64_t seed, uint64_t b) {
        w[0] = (uint32_t)b; w[1] = (uint32_t)(b >> 32); w[2] = 0u; w[3] = 0u;
        coop_philox4x32_10(w, (uint32_t)seed, (uint32_t)(seed >> 32));
    }
    /* out[0..n): words (or their exact uniforms) of seed's stream from block b on; whole blocks
       first, then the last partial one (a block: 4 words, 4 float32s or 2 float64s) */
    static void coop_philox_fill_u32(uint32_t* out, size_t n, uint64_t seed, uint64_t b) {
        uint32_t w[4];
        size_t i = 0;
        for (; i + 4 <= n; i += 4, ++b) {
            coop_philox_block(w, seed, b);
            for (int j = 0; j < 4; ++j) out[i + j] = w[j];
        }
        if (i < n) {
            coop_philox_block(w, seed, b);
            for (size_t j = 0; i + j < n; ++j) out[i + j] = w[j];
        }
    }
    static inline float coop_uniform_f32(uint32_t w) {
        return (float)(w >> 8) * 5.9604644775390625e-08f;                 /* 2**-24 */
    }
    static void coop_philox_fill_f32(float* out, size_t n, uint64_t seed, uint64_t b) {
        uint32_t w[4];
        size_t i = 0;
        for (; i + 4 <= n; i += 4, ++b) {
            coop_philox_block(w, seed, b);
            for (int j = 0; j < 4; ++j) out[i + j] = coop_uniform_f32(w[j]);
        }
        if (i < n) {
            coop_philox_block(w, seed, b);
            for (size_t j = 0; i + j < n; ++j) out[i + j] = coop_uniform_f32(w[j]);
        }
    }
    static inline double coop_uniform_f64(uint32_t w0, uint32_t w1) {
        return ((double)(w0 >> 5) * 67108864.0 + (double)(w1 >> 6))       /* 2**26 */
               * 1.1102230246251565e-16;                                   /* 2**-53 */
    }
    static void coop_philox_fill_f64(double* out, size_t n, uint64_t seed, uint64_t b) {
        uint32_t w[4];
        size_t i = 0;
        for (; i + 2 <= n; i += 2, ++b) {
            coop_philox_block(w, seed, b);
            out[i] = coop_uniform_f64(w[0], w[1]);
            out[i + 1] = coop_uniform_f64(w[2], w[3]);
        }
        if (i < n) {
            coop_philox_block(w, seed, b);
            out[i] = coop_uniform_f64(w[0], w[1]);
        }
    }
    """
    void coop_philox4x32_10(uint32_t* c, uint32_t k0, uint32_t k1) nogil
    void coop_philox_fill_u32(uint32_t* out, size_t n, uint64_t seed, uint64_t b) nogil
    void coop_philox_fill_f32(float* out, size_t n, uint64_t seed, uint64_t b) nogil
    void coop_philox_fill_f64(double* out, size_t n, uint64_t seed, uint64_t b) nogil


def fill(out, uint64_t seed, uint64_t block):
    """Fill out (a C-contiguous 1-D uint32, float32 or float64 array) with seed's stream from
    block `block` on, by coop.random's mappings; nothing else is allocated."""
    cdef uint32_t[::1] u32
    cdef float[::1] f32
    cdef double[::1] f64
    cdef size_t n = out.shape[0]
    if n == 0:
        return
    kind = out.dtype.char
    if kind == "I":
        u32 = out
        with nogil:
            coop_philox_fill_u32(&u32[0], n, seed, block)
    elif kind == "f":
        f32 = out
        with nogil:
            coop_philox_fill_f32(&f32[0], n, seed, block)
    elif kind == "d":
        f64 = out
        with nogil:
            coop_philox_fill_f64(&f64[0], n, seed, block)
    else:
        raise TypeError(f"Philox streams draw uint32, float32 or float64, not {out.dtype}")


def rounds(uint32_t[:, ::1] counters, uint32_t k0, uint32_t k1):
    """Philox-4x32-10 of each row of counters (an (m, 4) uint32 array), in place, under the
    key (k0, k1)."""
    cdef Py_ssize_t i
    if counters.shape[1] != 4:
        raise ValueError(f"Philox-4x32 counters are rows of 4 words, got {counters.shape[1]}")
    with nogil:
        for i in range(counters.shape[0]):
            coop_philox4x32_10(&counters[i, 0], k0, k1)
