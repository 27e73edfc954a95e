"""Arrays over arena memory: a storage's bytes as one flat array, and views rebuilt on it.

Works for NumPy and CuPy alike; the runtime never caches views, so a storage's memory is held
by its flat array alone (and by whatever a user borrowed, which held_elsewhere detects).
"""
import sys

import numpy

from coop.tensor import View


def flat_bytes(root):
    """The root array's bytes as one flat uint8 array (a view, never a copy)."""
    if not (root.flags.c_contiguous or root.flags.f_contiguous):
        # dense in another axis order (a ufunc's order="K" output for a transposed input):
        # permute to memory order first, or reshape would copy
        root = root.transpose(sorted(range(root.ndim), key=lambda a: -root.strides[a]))
    return root.reshape(-1, order="A").view("uint8")


def data_ptr(array):
    return array.__array_interface__["data"][0] if isinstance(array, numpy.ndarray) else array.data.ptr


def view_of(storage, array, flat):
    return View(storage, array.shape, array.dtype, array.strides, data_ptr(array) - data_ptr(flat))


def build_view(xp, flat, view):
    """An array for view on a storage whose bytes are flat."""
    if xp is numpy:
        return numpy.ndarray(view.shape, view.dtype, buffer=flat, offset=view.offset, strides=view.strides)
    return xp.ndarray(view.shape, view.dtype, memptr=flat.data + view.offset, strides=view.strides)


def host_copy(xp, array):
    return numpy.array(array if xp is numpy else xp.asnumpy(array), copy=True)


def held_elsewhere(flat):
    """True when something besides the storage refers to its memory (a user's view)."""
    # expected references to flat: the storage's attribute, this call's argument and
    # getrefcount's; to the root (flat.base): flat and getrefcount's argument. NumPy views made
    # by others point at the root; CuPy views hold a MemoryPointer to the same memory object.
    if sys.getrefcount(flat) > 3 or sys.getrefcount(flat.base) > 2:
        return True
    return not isinstance(flat, numpy.ndarray) and sys.getrefcount(flat.data.mem) > 2
