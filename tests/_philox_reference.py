"""The pure-NumPy Philox-4x32-10 that coop.random used before its compiled host path, kept as
the reference its draws must equal bit for bit: whole-array uint32/uint64 arithmetic, a chunk of
blocks at a time, using the output's own memory as scratch."""
import numpy

#: Philox-4x32's multipliers and Weyl key increments (Random123's philox.h)
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
_MASK32 = 0xFFFFFFFF
_32 = numpy.uint64(32)
_M0, _M1 = numpy.uint64(M0), numpy.uint64(M1)
_U64, _U32 = numpy.dtype("<u8"), numpy.dtype("<u4")    # native on little-endian hosts
_WORDS_PER_BLOCK = 4
#: blocks per chunk of the NumPy path (its scratch: 24 bytes a block of a chunk): at most
#: CHUNK, at least MIN_CHUNK, else 1 / SCRATCH_SHARE of the draw, so the scratch is at most
#: 3/16 of the draw's bytes: a dropout mask under a tight budget needs what a Generator did
CHUNK, MIN_CHUNK, SCRATCH_SHARE = 4096, 64, 8
_WORDS = {numpy.dtype(numpy.uint32): 1, numpy.dtype(numpy.float32): 1,
          numpy.dtype(numpy.float64): 2}


def philox4x32_10(counters, k0, k1):
    """Philox-4x32-10 of each row of counters (an (n, 4) array of uint32 values c0..c3) under
    the key (k0, k1) (ints below 2**32): an (n, 4) uint32 array (NumPy)."""
    c = numpy.asarray(counters, dtype=numpy.uint64).reshape(-1, 4)
    pairs, out = numpy.empty((2, len(c)), dtype=_U64), numpy.empty((len(c), 2), dtype=_U64)
    for k in range(2):                           # c1 | c0 << 32 and c3 | c2 << 32
        numpy.left_shift(c[:, 2 * k], _32, out=pairs[k])
        pairs[k] |= c[:, 2 * k + 1]
    _blocks(pairs, out, _key_schedule(int(k0), int(k1)))
    return out.view(_U32).astype(numpy.uint32, copy=False)


def draw(seed, block, n, dtype):
    """n values of dtype (uint32, float32 or float64) from seed's stream, from block `block`
    on, by the module's mappings (NumPy). Computed a chunk of blocks at a time, using the
    output's own memory as scratch, so the temporaries (in the arena, on coop's host backend)
    stay small next to the output."""
    dtype = numpy.dtype(dtype)
    nblocks = -(-n * _WORDS[dtype] // _WORDS_PER_BLOCK)
    out = numpy.empty((nblocks, 2), dtype=_U64)  # a block's 4 words: 2 little-endian uint64
    size = min(CHUNK, max(MIN_CHUNK, -(-nblocks // SCRATCH_SHARE)))
    pairs = numpy.empty((2, min(size, nblocks)), dtype=_U64)
    keys = _key_schedule(seed & _MASK32, seed >> 32)
    for start in range(0, nblocks, size):
        chunk = out[start:start + size]
        p = pairs[:, :len(chunk)]
        b = numpy.arange(block + start, block + start + len(chunk), dtype=numpy.uint64)
        numpy.left_shift(b, _32, out=p[0])       # c1 | c0 << 32: c0 = b mod 2**32, c1 = b >> 32
        b >>= _32
        p[0] |= b
        del b
        p[1] = 0                                 # c3 | c2 << 32: c2 = c3 = 0
        _blocks(p, chunk, keys)
        _uniform(chunk, dtype, pairs.reshape(-1)[:chunk.size].reshape(chunk.shape))
    return out.view(dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(-1)[:n]


def _blocks(pairs, out, keys):
    """The ten rounds on pairs ((2, m) uint64 rows p = c1 | c0 << 32, r = c3 | c2 << 32: one
    64-bit product M * c holds a round's hi and lo words where they go) under keys (from
    _key_schedule), consumed; the words c0..c3 land in out ((m, 2) little-endian uint64, its
    memory the rounds' scratch)."""
    t = out.reshape(2, -1)
    t_p, t_r = t
    for k0, k1 in keys:
        # c0' = hi(M1 c2) ^ c1 ^ k0, c1' = lo(M1 c2): as c1' | c0' << 32, M1 c2 ^ (c1 ^ k0) << 32;
        # likewise c2', c3' from M0 c0, c3 and k1 (rows shifted, then combined, together)
        numpy.right_shift(pairs[::-1], _32, out=t)
        t_p *= _M1
        t_r *= _M0
        t_p ^= k0
        t_r ^= k1
        pairs <<= _32
        pairs ^= t
    for k in range(2):                           # swap the halves: c0 | c1 << 32, c2 | c3 << 32
        numpy.right_shift(pairs[k], _32, out=out[:, k])
        pairs[k] <<= _32
        out[:, k] |= pairs[k]


def _key_schedule(k0, k1):
    """Each round's key words, as uint64 scalars k << 32."""
    keys = []
    for _ in range(ROUNDS):
        keys.append((numpy.uint64(k0 << 32), numpy.uint64(k1 << 32)))
        k0, k1 = (k0 + W0) & _MASK32, (k1 + W1) & _MASK32
    return keys


def _uniform(chunk, dtype, scratch):
    """A chunk's words ((m, 2) little-endian uint64) as the documented values of dtype, in
    place (a same-size integer-to-float copy is exact and needs no temporary); scratch: an
    array like chunk."""
    if dtype == numpy.float32:
        w = chunk.view(_U32)
        w >>= numpy.uint32(8)
        f = chunk.view("<f4")
        numpy.copyto(f, w, casting="unsafe")
        f *= numpy.float32(2.0 ** -24)
    elif dtype == numpy.float64:
        # one uint64 holds consecutive words w0 | w1 << 32: (w0 >> 5) * 2**26 + (w1 >> 6)
        numpy.right_shift(chunk, numpy.uint64(38), out=scratch)
        chunk &= numpy.uint64(_MASK32)
        chunk >>= numpy.uint64(5)
        chunk <<= numpy.uint64(26)
        chunk |= scratch
        f = chunk.view("<f8")
        numpy.copyto(f, chunk, casting="unsafe")
        f *= 2.0 ** -53
