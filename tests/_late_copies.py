"""A host backend whose copies back ahead land only when awaited, as a device's do."""
import weakref

import numpy as np

from coop.backends._host import HostBackend


class LateCopies(HostBackend):
    """A host backend whose copies back ahead arrive late: from_host(..., ahead=True) returns
    an array of poisoned bytes (0xFF: NaN in floats) and the host copy's bytes land only at
    await_host, as a device's copy on its copy stream lands only when the stream that waits
    for it gets there. A read, write or move of such an array before the engine awaits it
    sees the poison."""

    def __init__(self, budget, alignment=64):   # (HostBackend's __cinit__ takes both)
        self.late = {}          # id(copy) -> (copy, a weak reference to the array it lands in)
        self.landed = 0         # copies that landed (awaited)

    def from_host(self, copy, placement, ahead=False):
        array = super().from_host(copy, placement)
        if ahead and array.nbytes:
            array.view(np.uint8).reshape(-1)[:] = 0xFF
            self.late[id(copy)] = (copy, weakref.ref(array))   # (a reference would hold it)
        return array

    def await_host(self, copy):
        held, ref = self.late.pop(id(copy))
        array = ref()
        # awaited after its array was freed (dropped, or moved away): the copy would land on a
        # piece that may be handed out again
        assert held is copy and array is not None, "a copy back ahead awaited after its array died"
        np.copyto(array, copy, casting="no")
        self.landed += 1
