"""Arrays over arena memory: a storage's memory array, and views rebuilt on it.

A storage's memory is held by one array (``memory_of``): the kernel's own output when it is
C-contiguous (a tensor on it as it is needs no new view), else its bytes as one flat array.
Works for NumPy and CuPy alike; the runtime caches no other view, so a storage's memory is held
by that array alone (and by whatever a user borrowed, which ArrayExecutor.drop detects).
"""
import numpy


def memory_of(root):
    """The array to keep for a root array's memory: itself when C-contiguous, else its bytes."""
    return root if root.flags.c_contiguous else flat_bytes(root)


def flat_bytes(root):
    """The root array's bytes as one flat uint8 array (a view, never a copy)."""
    if not (root.flags.c_contiguous or root.flags.f_contiguous):
        # dense in another axis order (a ufunc's order="K" output for a transposed input):
        # permute to memory order first, or reshape would copy
        root = root.transpose(sorted(range(root.ndim), key=lambda a: -root.strides[a]))
    return root.reshape(-1, order="A").view("uint8")


def build_view(xp, flat, view):
    """An array for view on a storage whose memory array is flat (C-contiguous)."""
    if xp is numpy:
        return numpy.ndarray(view.shape, view.dtype, buffer=flat, offset=view.offset, strides=view.strides)
    return xp.ndarray(view.shape, view.dtype, memptr=flat.data + view.offset, strides=view.strides)


def host_copy(xp, array):
    return numpy.array(array if xp is numpy else xp.asnumpy(array), copy=True)
