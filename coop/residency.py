"""Residency: pinning, evicting, releasing and recomputing storages (a part of Runtime).

The arena core chooses victims; this decides what evicting means (dropping a storage's array
so its piece is freed) and recomputes evicted storages iteratively, pinning what a pending op
needs and evicting dependencies recomputed only for this call right after their last use.
"""
from coop.arrays import held_elsewhere


class Residency:
    """Runtime's residency methods; they use its arena, backend, counters and _storages."""

    def _make_resident(self, targets):
        """Recompute every evicted storage in targets, iteratively (no recursion limit).

        A frame is [storage, its producer's input storages, next input to pin]. Inputs are
        pinned as they become resident; dependencies recomputed only for this call are evicted
        right after the last pending op that reads them (eager eviction).
        """
        for target in targets:
            if target.array is not None:
                continue
            needs = {}        # storage -> pending frames that read it
            temps = set()     # recomputed here as dependencies
            frames = [self._frame(target, needs)]
            try:
                while frames:
                    frame = frames[-1]
                    storage, inputs, i = frame
                    if i < len(inputs):
                        dep = inputs[i]
                        if dep.array is None:
                            if dep.op is None:
                                raise RuntimeError(f"storage {dep.sid} was lost: it has no producer")
                            frames.append(self._frame(dep, needs))
                            temps.add(dep)
                            continue
                        self._pin([dep])
                        frame[2] = i + 1
                        continue
                    if storage.array is None:
                        self._recompute(storage.op)
                        if storage.array is None:
                            raise RuntimeError(f"recomputing {storage.op!r} did not produce "
                                               f"storage {storage.sid}")
                    self._unpin(inputs)
                    frames.pop()
                    for dep in inputs:
                        needs[dep] -= 1
                        if needs[dep] == 0 and dep in temps and dep not in targets:
                            self._demote(dep)
            except BaseException:
                # an error (out of memory while recomputing) leaves no dependency pinned; unpin
                # without evicting: the traceback still refers to the failed kernel's arrays
                for _, inputs, i in frames:
                    self._unpin_quietly(inputs[:i])
                raise

    def _frame(self, storage, needs):
        inputs = _unique(v.storage for v in storage.op.inputs)
        for dep in inputs:
            needs[dep] = needs.get(dep, 0) + 1
        return [storage, inputs, 0]

    def _demote(self, storage):
        """A dependency recomputed for one rematerialization: keep it, but first in line to be
        evicted (as if never touched since the start) unless an op reads it again."""
        if storage.array is not None:
            self.arena.touch(storage.sid, 0.0)
            self.counters["demotions"] += 1

    def _evict_eagerly(self, storage):
        info = self.arena.storage_info(storage.sid)
        if info["resident"] and info["pins"] == 0 and info["evictable"]:
            self._evict([storage.sid])
            self.counters["eager_evictions"] += 1

    def _evict(self, sids):
        """The core's evict callback: drop each victim's array so its piece is freed."""
        for sid in sids:
            storage = self._storages.get(sid)
            if storage is None or storage.array is None or storage.held:
                continue
            if self.xp is None:
                offset, storage.array = storage.array, None
                self.arena.free(offset)
            elif held_elsewhere(storage.array):
                storage.held = True
                self.counters["held"] += 1
                self.arena.set_evictable(sid, False)
            else:
                storage.array = None

    def _release(self, storage):
        """The last Tensor on storage went away: free its memory now (the record may stay)."""
        self.counters["releases"] += 1
        if self.trace is not None:
            self.trace.release(storage)
        if storage.op is None or storage.array is None or self._pins.get(storage.sid):
            return   # constants live as long as a reader; pinned ones are dropped on unpin
        if self.arena.has_storage(storage.sid) and not storage.held:
            self._evict([storage.sid])

    def _forget(self, storage):
        """storage's record died: nothing can need it any more."""
        if self.arena.has_storage(storage.sid):
            self.arena.remove_storage(storage.sid)
        self._pins.pop(storage.sid, None)
        if self.xp is None and storage.array is not None:
            self.arena.free(storage.array)

    def _pin(self, storages):
        for s in storages:
            self.arena.pin(s.sid)
            self._pins[s.sid] = self._pins.get(s.sid, 0) + 1

    def _unpin_quietly(self, storages):
        """Unpin without releasing (the outputs' Tensors are about to be made)."""
        for s in storages:
            self.arena.unpin(s.sid)
            self._pins[s.sid] -= 1
            if not self._pins[s.sid]:
                del self._pins[s.sid]

    def _unpin(self, storages):
        for s in storages:
            self.arena.unpin(s.sid)
            left = self._pins[s.sid] - 1
            if left:
                self._pins[s.sid] = left
            else:
                del self._pins[s.sid]
                if s.users == 0 and s.op is not None and s.array is not None:
                    # no Tensor holds it (released while pinned, or recomputed as a dependency):
                    # drop its memory; the program released it once, already recorded
                    self._evict_eagerly(s)


def _unique(storages):
    seen = []
    for s in storages:
        if all(s is not t for t in seen):
            seen.append(s)
    return seen
