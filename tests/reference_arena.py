"""Plain-Python model of ``coop._core.Arena`` (docs/core.md): small and obviously correct, not fast.

Pieces are a sorted list, best fit is a scan, c' is recomputed from explicit class sets on every
use, and the coop window is a brute force over all (start, end) pairs. The hypothesis tests drive
it and the Cython arena with the same calls and require identical answers after every step.
"""
import math
import operator
import time

from coop.errors import InternalError, OutOfMemoryError
from _arena import per_byte

EXPENSIVE = 0
CHEAP = 1
LOWEST = 2
NO_STORAGE = -1
LOG_MOVE = -2  # take_log: (old offset, LOG_MOVE, new offset, size, storage id)
POLICIES = ("coop", "dtr", "dte", "lru", "size", "none")

IDEAL_SPACE = 1 << 62  # bytes the pieces of an ideal arena tile

# fields of a piece, a list [offset, size, storage id or None, free]
OFFSET, SIZE, STORAGE, FREE = range(4)


def _integer(value, what):
    """An integer argument (NumPy integers too); bools and floats are refused like the core does."""
    if isinstance(value, (bool, float)):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    return operator.index(value)


def _nonnegative(value, what):
    n = _integer(value, what)
    if n < 0:
        raise ValueError(f"{what} must be >= 0, got {n}")
    return n


def _as_float(value):
    """float(value), or NaN where it is not a number (every range check then refuses it)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _cost(value):
    cost = float(value)
    if not math.isfinite(cost) or cost < 0.0:
        raise ValueError(f"cost must be a finite number >= 0, got {value!r}")
    return cost


class _Storage:
    """Eviction metadata of one registered storage; residency is looked up in the pieces."""

    def __init__(self, cost, evictable):
        self.cost = cost
        self.neighbors = set()
        self.evictable = evictable
        self.movable = True
        self.offload = math.inf   # cost of its way out to a host tier; inf: none
        self.pins = 0
        self.last_access = 0.0
        self.eq_class = None  # equivalence class id while evicted after having been resident


class ReferenceArena:
    """Same API and semantics as coop.Arena."""

    def __init__(self, nbytes, alignment=64, ideal=False):
        alignment = _nonnegative(alignment, "alignment")
        if alignment == 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {alignment}")
        nbytes = _nonnegative(nbytes, "the arena size")
        self.capacity = nbytes // alignment * alignment
        self.alignment = alignment
        if self.capacity == 0:
            raise ValueError(f"an arena of {nbytes} bytes holds no {alignment}-byte piece")
        # an ideal arena counts bytes only: its pieces tile a space so large that placement never
        # fails for want of a contiguous range; only the budget refuses requests
        self.ideal = bool(ideal)
        self._space = IDEAL_SPACE if self.ideal else self.capacity
        self._pieces = [[0, self._space, None, True]]
        self._storages = {}  # sid -> _Storage
        self._classes = {}  # class id -> [set of member sids, cost]
        self._next_class = 0
        self._peak_used = 0
        self._evictions = 0
        self._bytes_evicted = 0
        self._searches = 0
        self._search_time = 0.0
        self._fragmentation_sum = 0.0
        self._failed = 0
        self._largest_ratio_sum = 0.0
        self._owner = None
        self.move_cost_per_byte = math.inf   # move_cost: inf, coop never moves
        self._room_price = 0.0               # room_price: what the last coop choice paid per byte
        self.moves_if_blocked = False  # True: coop moves only when no evict-only window exists
        self._excess_weight = 0.0      # excess_weight: coop's windows compared per byte freed
        self._moves = 0
        self._bytes_moved = 0
        self._move_cost = 0.0
        self._offloads = 0
        self._bytes_offloaded = 0
        self.offload_last = True  # offloads count only when no choice exists without them
        self._open = False        # the choice being made counts offloads
        self._taken = False       # the victims being carried out were chosen with offloads
        self._plan = None  # the last coop choice: (cost, start, pieces, moves)
        self._log = None  # [offset, nbytes or -1, ...] while start_log is in effect

    # ---- lookups ----------------------------------------------------------------------------

    def _index_at(self, offset):
        for i, piece in enumerate(self._pieces):
            if piece[OFFSET] == offset:
                return i
        return None

    def _piece_of(self, sid):
        """The used piece bound to sid, or None when sid is not resident."""
        for piece in self._pieces:
            if piece[STORAGE] == sid:
                return piece
        return None

    def _get(self, sid):
        sid = _integer(sid, "storage id")
        if sid not in self._storages:
            raise ValueError(f"unknown storage {sid}")
        return self._storages[sid]

    @property
    def used_bytes(self):
        return sum(p[SIZE] for p in self._pieces if not p[FREE])

    def _free_bytes(self):
        return self.capacity - self.used_bytes

    def _largest_free(self):
        if self.ideal:
            return self._free_bytes()
        return max((p[SIZE] for p in self._pieces if p[FREE]), default=0)

    # ---- argument checks ---------------------------------------------------------------------

    def _request(self, nbytes):
        n = _nonnegative(nbytes, "the request")
        if n > self.capacity:
            raise self._oom(n)
        return max(-(-n // self.alignment) * self.alignment, self.alignment)

    def _unbound(self, storage):
        """storage as a registered, non-resident sid, or None for NO_STORAGE."""
        sid = _integer(storage, "storage id")
        if sid == NO_STORAGE:
            return None
        self._get(sid)
        if self._piece_of(sid) is not None:
            raise ValueError(f"storage {sid} is already resident")
        return sid

    def _policy(self, policy):
        if not isinstance(policy, str) or policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        if self.ideal and policy == "coop":
            raise ValueError("an ideal arena has no addresses to scan: use a loop policy")
        return policy

    @staticmethod
    def _placement(placement):
        placement = _integer(placement, "placement")
        if placement not in (EXPENSIVE, CHEAP, LOWEST):
            raise ValueError(f"placement must be EXPENSIVE, CHEAP or LOWEST, got {placement}")
        return placement

    def _oom(self, request):
        free, largest = self._free_bytes(), self._largest_free()
        return OutOfMemoryError(
            f"cannot allocate {request} bytes: budget {self.capacity} bytes, {free} bytes free, "
            f"largest free range {largest} bytes; raise the budget, or free or unpin tensors",
            request, self.capacity, free, largest)

    # ---- placement ---------------------------------------------------------------------------

    def _place(self, size, placement, sid, nbytes):
        """Best fit of a rounded size; returns the offset or -1. Logs (offset, nbytes)."""
        if self.ideal and self.used_bytes + size > self.capacity:
            return -1
        fits = [(p[SIZE], p[OFFSET], i) for i, p in enumerate(self._pieces)
                if p[FREE] and p[SIZE] >= size]
        if not fits:
            return -1
        # best fit: the smallest piece, among equal sizes the lowest (CHEAP: the highest);
        # LOWEST: first fit in address order (the pieces' list order)
        if placement == LOWEST:
            _, offset, i = min(fits, key=lambda f: f[1])
        elif placement == CHEAP:
            _, offset, i = min(fits, key=lambda f: (f[0], -f[1]))
        else:
            _, offset, i = min(fits)
        piece = self._pieces[i]
        if piece[SIZE] == size:
            used = piece
        elif placement in (EXPENSIVE, LOWEST):
            used = [offset, size, None, False]
            piece[OFFSET] += size
            piece[SIZE] -= size
            self._pieces.insert(i, used)
        else:
            used = [offset + piece[SIZE] - size, size, None, False]
            piece[SIZE] -= size
            self._pieces.insert(i + 1, used)
        used[FREE] = False
        self._peak_used = max(self._peak_used, self.used_bytes)
        if sid is not None:
            self._bind(used, sid)
        if self._log is not None:
            self._log += [used[OFFSET], nbytes]
        return used[OFFSET]

    def _bind(self, piece, sid):
        piece[STORAGE] = sid
        self._leave_class(sid)

    # ---- classes -----------------------------------------------------------------------------

    def _join_class(self, sid):
        """sid was just evicted: class {sid}, merged with every evicted neighbor's class."""
        st = self._storages[sid]
        cid = self._next_class
        self._next_class += 1
        self._classes[cid] = [{sid}, st.cost]
        st.eq_class = cid
        for n in sorted(st.neighbors):
            other = self._storages[n].eq_class
            if other is not None and other != cid:
                members, cost = self._classes.pop(other)
                self._classes[cid][0] |= members
                self._classes[cid][1] += cost
                for m in members:
                    self._storages[m].eq_class = cid

    def _leave_class(self, sid):
        st = self._storages[sid]
        if st.eq_class is None:
            return
        entry = self._classes[st.eq_class]
        entry[0].remove(sid)
        entry[1] -= st.cost
        if not entry[0]:
            del self._classes[st.eq_class]
        st.eq_class = None

    def _cprime(self, sid):
        st = self._storages[sid]
        classes = {self._storages[n].eq_class for n in st.neighbors} - {None}
        return st.cost + sum(self._classes[c][1] for c in classes)

    # ---- policies ----------------------------------------------------------------------------

    def _candidate(self, piece):
        if piece[FREE] or piece[STORAGE] is None:
            return False
        st = self._storages[piece[STORAGE]]
        return (st.evictable or (self._open and st.offload < math.inf)) and st.pins == 0

    def _way_out(self, sid):
        """A candidate's cost of leaving: when the choice counts offloads, the cheaper of
        evicting it (c', when evictable) and offloading it; else, on a tie, or when it has no
        offload, c'."""
        st = self._storages[sid]
        cprime = self._cprime(sid)
        if self._open and st.offload < math.inf and (st.offload < cprime or not st.evictable):
            return st.offload
        return cprime

    def offload_wins(self, sid):
        st = self._get(sid)
        sid = _integer(sid, "storage id")
        return bool((self._taken or not self.offload_last) and st.offload < math.inf
                    and (st.offload < self._cprime(sid) or not st.evictable))

    def _staleness(self, sid, now):
        s = now - self._storages[sid].last_access
        return s if s > 1.0 else 1.0      # max(s, 1.0); NaN (inf - inf) counts as 1.0

    def _score(self, i, policy, now):
        piece = self._pieces[i]
        sid, nbytes = piece[STORAGE], piece[SIZE]
        if policy == "dtr":
            return self._way_out(sid) / (nbytes * self._staleness(sid, now))
        if policy == "dte" and not self.ideal:   # an ideal arena has no neighbors in memory
            if i > 0 and self._pieces[i - 1][FREE]:
                nbytes += self._pieces[i - 1][SIZE]
            if i + 1 < len(self._pieces) and self._pieces[i + 1][FREE]:
                nbytes += self._pieces[i + 1][SIZE]
        if policy == "dte":
            return self._way_out(sid) / (nbytes * self._staleness(sid, now))
        if policy == "lru":
            return self._storages[sid].last_access
        return 1.0 / nbytes  # size

    def _window(self, size, now):
        """Brute force over all windows i..j, cost P[j+1] - P[i] as docs/core.md defines it
        (with an excess_weight, over the smallest window from each start, per byte freed)."""
        pieces = self._pieces
        h = []  # None for a piece that is neither free nor a candidate
        for p in pieces:
            if p[FREE]:
                h.append(0.0)
            elif self._candidate(p):
                h.append(self._way_out(p[STORAGE]) / self._staleness(p[STORAGE], now))
            else:
                h.append(None)
        running = [0.0]
        for x in h:
            running.append(0.0 if x is None else running[-1] + x)
        best = None
        for i in range(len(pieces)):
            covered = 0
            for j in range(i, len(pieces)):
                if h[j] is None:
                    break
                covered += pieces[j][SIZE]
                if covered >= size:
                    cost = running[j + 1] - running[i]
                    key = (self._per(cost, covered, size), pieces[i][OFFSET], j - i + 1)
                    if best is None or key < best[0]:
                        best = (key, i, j, cost)
                    if self._excess_weight:
                        break
        if best is None:
            return []
        key, i, j, cost = best
        self._plan = (cost, key[1], key[2], [])
        return [p[STORAGE] for p in pieces[i:j + 1] if not p[FREE] and self._candidate(p)]

    def _moving_window(self, size, now):
        """docs/core.md, "Moving": every window i..j of pieces that are free, candidates or
        movable, each with its cheapest plan (_window_plan); the least (cost, start, pieces)."""
        pieces, rate = self._pieces, self.move_cost_per_byte
        ways = []  # per piece: None (a wall), "free", or (h or None, move cost or None)
        for p in pieces:
            if p[FREE]:
                ways.append("free")
                continue
            st = self._storages[p[STORAGE]] if p[STORAGE] is not None else None
            if st is None or st.pins:
                ways.append(None)
                continue
            h = (self._way_out(p[STORAGE]) / self._staleness(p[STORAGE], now)
                 if st.evictable or (self._open and st.offload < math.inf) else None)
            s = self._staleness(p[STORAGE], now)
            # a move's way out: its copy and the room it takes, over one staleness
            price = self._room_price
            m = ((p[SIZE] * rate + (price * p[SIZE] * s if price > 0.0 else 0.0)) / s
                 if st.movable else None)
            ways.append(None if h is None and m is None else (h, m))
        best = None
        for i in range(len(pieces)):
            covered = 0
            for j in range(i, len(pieces)):
                if ways[j] is None:
                    break
                covered += pieces[j][SIZE]
                if covered < size:
                    continue
                plan = self._window_plan(ways, i, j)
                if plan is not None:
                    key = (self._per(plan[0], covered, size), pieces[i][OFFSET], j - i + 1)
                    if best is None or key < best[0]:
                        best = (key, i, j, plan[1])
                if self._excess_weight:
                    break
        if best is None:
            return [], []
        (_, start, n), i, j, moved = best
        outside = sorted((p[SIZE], p[OFFSET]) for k, p in enumerate(pieces)
                         if p[FREE] and not i <= k <= j)
        # each free piece outside: [room left, offset (its address), next free byte]
        room = {b[1]: [b[0], b[1], b[1]] for b in outside}
        destination = {}
        moved = set(moved)
        for _, t in sorted((-pieces[t][SIZE], t) for t in moved):
            fit = next(b for b in outside if b[0] >= pieces[t][SIZE])
            outside.remove(fit)
            destination[t] = fit[1]
            room[fit[1]][0] -= pieces[t][SIZE]
            room[fit[1]][2] += pieces[t][SIZE]
        # the room the destinations leave: candidates still evicted whose move is cheaper, by
        # saving, each into the smallest room that holds it (then the lowest address)
        extra = sorted((ways[t][1] - ways[t][0], t) for t in range(i, j + 1)
                       if ways[t] != "free" and t not in moved and ways[t][0] is not None
                       and ways[t][1] is not None and ways[t][1] < ways[t][0])
        for _, t in extra:
            fits = [r for r in room.values() if r[0] >= pieces[t][SIZE]]
            if fits:
                r = min(fits, key=lambda r: (r[0], r[1]))
                destination[t] = r[2]
                r[0] -= pieces[t][SIZE]
                r[2] += pieces[t][SIZE]
                moved.add(t)
        cost = 0.0
        for t in range(i, j + 1):
            if ways[t] != "free":
                cost = cost + (ways[t][1] if t in moved else ways[t][0])
        moves = [(pieces[t][STORAGE], destination[t]) for t in range(i, j + 1) if t in moved]
        victims = [pieces[t][STORAGE] for t in range(i, j + 1)
                   if ways[t] != "free" and t not in moved]
        self._plan = (cost, start, n, moves)
        return victims, moves

    def _window_plan(self, ways, i, j):
        """(cost, moved piece indices) of window i..j, or None when the pieces that must move
        cannot each have their own free piece outside the window. Forced movers first, then the
        optional ones by saving (largest first, then lowest address) while they still fit."""
        pieces = self._pieces
        bins = sorted((p[SIZE] for k, p in enumerate(pieces) if p[FREE] and not i <= k <= j),
                      reverse=True)
        chosen, moved = [], set()

        def fits(extra):
            sizes = sorted(chosen + [extra], reverse=True)
            return len(sizes) <= len(bins) and all(a <= b for a, b in zip(sizes, bins))

        optional = []
        for t in range(i, j + 1):
            if ways[t] == "free" or ways[t][1] is None:
                continue
            h, m = ways[t]
            if h is None:
                if not fits(pieces[t][SIZE]):
                    return None
                chosen.append(pieces[t][SIZE])
                moved.add(t)
            elif m < h:
                optional.append((m - h, t))
        for _, t in sorted(optional):
            if len(chosen) >= len(bins):
                break
            if fits(pieces[t][SIZE]):
                chosen.append(pieces[t][SIZE])
                moved.add(t)
        total = 0.0
        for t in range(i, j + 1):
            if ways[t] != "free":
                total = total + (ways[t][1] if t in moved else ways[t][0])
        return total, moved

    def _victims(self, size, policy, now):
        """The choice (victims; the plan's moves in _plan_moves); _open afterwards: whether it
        counted offloads (with offload_last, only when none exists without them)."""
        offloading = any(st.offload < math.inf for st in self._storages.values())
        self._open = offloading and not self.offload_last
        victims = self._choice(size, policy, now)
        if self.offload_last and offloading and not victims and not self._plan_moves:
            self._open = True
            victims = self._choice(size, policy, now)
            if not victims and not self._plan_moves:
                self._open = False
        return victims

    def _choice(self, size, policy, now):
        self._plan = None
        self._plan_moves = []
        if policy == "none":
            return []
        if policy == "coop" and math.isfinite(self.move_cost_per_byte):
            if self.moves_if_blocked:
                victims = self._window(size, now)
                if self._plan is not None:
                    return victims
            victims, self._plan_moves = self._moving_window(size, now)
            return victims
        if policy == "coop":
            return self._window(size, now)
        scored = [(self._score(i, policy, now), p[OFFSET], p[STORAGE])
                  for i, p in enumerate(self._pieces) if self._candidate(p)]
        return [min(scored)[2]] if scored else []

    # ---- Python API ---------------------------------------------------------------------------

    def allocate(self, nbytes, placement=EXPENSIVE, storage=NO_STORAGE):
        size = self._request(nbytes)
        sid = self._unbound(storage)
        return self._place(size, self._placement(placement), sid, operator.index(nbytes))

    def request(self, nbytes, placement=EXPENSIVE):
        n = _nonnegative(nbytes, "the request")
        placement = self._placement(placement)
        size = self._request(n)
        offset = self._place(size, placement, None, n)
        if offset >= 0:
            return offset
        owner = self._owner
        if owner is None:
            return self._evict_loop(size, n, placement, "none", 0.0, None, None)
        if owner.lock is None:
            return self._owner_evicts(size, n, placement, owner)
        with owner.lock:      # what the holder left may fit now
            offset = self._place(size, placement, None, n)
            return offset if offset >= 0 else self._owner_evicts(size, n, placement, owner)

    def _owner_evicts(self, size, n, placement, owner):
        if self.ideal and owner.policy == "coop":
            raise ValueError("an ideal arena has no addresses to scan")
        return self._evict_loop(size, n, placement, owner.policy, float(owner.now),
                                owner.callback, None)

    def attach(self, owner):
        if self._owner is not None and self._owner is not owner:
            raise ValueError("this arena already has an owner")
        self._owner = owner

    def detach(self, owner):
        if self._owner is not None and self._owner is not owner:
            raise ValueError("not this arena's owner")
        self._owner = None

    @property
    def owner(self):
        return self._owner

    def start_log(self):
        self._log = []

    def take_log(self):
        log, self._log = self._log or [], None
        return log

    def lowest_fit(self, nbytes):
        size = self._request(nbytes)
        if self.ideal and self.used_bytes + size > self.capacity:
            return -1
        return next((p[OFFSET] for p in self._pieces if p[FREE] and p[SIZE] >= size), -1)

    def free(self, offset):
        offset = _nonnegative(offset, "offset")
        i = self._index_at(offset)
        if i is None:
            raise ValueError(f"free of unknown offset {offset}")
        piece = self._pieces[i]
        if piece[FREE]:
            raise ValueError(f"double free of offset {offset}")
        sid = piece[STORAGE]
        piece[STORAGE] = None
        piece[FREE] = True
        if i + 1 < len(self._pieces) and self._pieces[i + 1][FREE]:
            piece[SIZE] += self._pieces.pop(i + 1)[SIZE]
        if i > 0 and self._pieces[i - 1][FREE]:
            self._pieces[i - 1][SIZE] += self._pieces.pop(i)[SIZE]
        if sid is not None:
            self._join_class(sid)
        if self._log is not None:
            self._log += [offset, -1]

    def bind(self, offset, storage):
        offset = _nonnegative(offset, "offset")
        i = self._index_at(offset)
        if i is None:
            raise ValueError(f"bind to unknown offset {offset}")
        piece = self._pieces[i]
        if piece[FREE]:
            raise ValueError(f"bind to offset {offset}: the piece is free")
        if piece[STORAGE] is not None:
            raise ValueError(f"bind to offset {offset}: the piece already holds a storage")
        sid = self._unbound(storage)
        if sid is None:
            raise ValueError("bind needs a storage id")
        self._bind(piece, sid)

    def add_storage(self, sid, cost=0.0, neighbors=(), evictable=True):
        sid = _integer(sid, "storage id")
        if sid < 0:
            raise ValueError(f"storage ids must be >= 0, got {sid}")
        if sid in self._storages:
            raise ValueError(f"storage {sid} is already registered")
        cost = _cost(cost)
        neighbors = [_integer(n, "storage id") for n in neighbors]
        for n in neighbors:
            if n != sid and n not in self._storages:
                raise ValueError(f"unknown storage {n}")
        st = _Storage(cost, bool(evictable))
        self._storages[sid] = st
        for n in neighbors:
            if n != sid:
                st.neighbors.add(n)
                self._storages[n].neighbors.add(sid)

    def remove_storage(self, sid):
        st = self._get(sid)
        sid = _integer(sid, "storage id")
        piece = self._piece_of(sid)
        if piece is not None:
            piece[STORAGE] = None
        self._leave_class(sid)
        for n in st.neighbors:
            self._storages[n].neighbors.discard(sid)
        del self._storages[sid]

    def has_storage(self, sid):
        return _integer(sid, "storage id") in self._storages

    def set_cost(self, sid, cost):
        st = self._get(sid)
        cost = _cost(cost)
        if st.eq_class is not None:
            self._classes[st.eq_class][1] += cost - st.cost
        st.cost = cost

    def set_evictable(self, sid, flag):
        self._get(sid).evictable = bool(flag)

    def set_offload(self, sid, cost):
        st = self._get(sid)
        c = float(cost)
        if c != c or c < 0.0:
            raise ValueError(f"an offload cost must be a number >= 0 (inf: none), got {cost!r}")
        st.offload = c

    def unbind(self, sid):
        """Resident sid leaves its piece unevicted: the piece stays used, anonymous."""
        self._get(sid)
        piece = self._piece_of(_integer(sid, "storage id"))
        if piece is None:
            raise ValueError(f"unbind of storage {sid}: it is not resident")
        piece[STORAGE] = None

    def pin(self, sid):
        self._get(sid).pins += 1

    def unpin(self, sid):
        st = self._get(sid)
        if st.pins == 0:
            raise ValueError(f"unpin of storage {sid}, which is not pinned")
        st.pins -= 1

    def touch(self, sid, now):
        self._get(sid).last_access = _clock(now)

    def storage_info(self, sid):
        st = self._get(sid)
        sid = _integer(sid, "storage id")
        piece = self._piece_of(sid)
        resident = piece is not None
        return {
            "resident": resident,
            "offset": piece[OFFSET] if resident else None,
            "nbytes": piece[SIZE] if resident else 0,
            "cost": st.cost,
            "cprime": self._cprime(sid) if resident else None,
            "last_access": st.last_access,
            "pins": st.pins,
            "evictable": st.evictable,
            "movable": st.movable,
            "offload": st.offload,
            "class_cost": self._classes[st.eq_class][1] if st.eq_class is not None else None,
        }

    def pieces(self):
        return [(p[OFFSET], p[SIZE], p[FREE], NO_STORAGE if p[STORAGE] is None else p[STORAGE])
                for p in self._pieces]

    def choose_victims(self, nbytes, policy, now):
        size = self._request(nbytes)
        victims = self._victims(size, self._policy(policy), _clock(now))
        self._open = False
        return victims

    def allocate_or_evict(self, nbytes, placement, policy, now, evict, storage=NO_STORAGE,
                          move=None):
        size = self._request(nbytes)
        policy = self._policy(policy)
        sid = self._unbound(storage)
        placement = self._placement(placement)
        return self._evict_loop(size, operator.index(nbytes), placement, policy, _clock(now), evict,
                                sid, move)

    def _relocate(self, sid, offset):
        """sid's piece moves to the low end of the free piece at offset; the old one is freed
        without evicting sid."""
        old = self._piece_of(sid)
        i = self._index_at(offset)
        if old is None or i is None or not self._pieces[i][FREE] or \
                self._pieces[i][SIZE] < old[SIZE]:
            raise ValueError(f"move of storage {sid} to offset {offset}: no free piece that holds "
                             "it starts there")
        target = self._pieces[i]
        if target[SIZE] == old[SIZE]:
            used = target
        else:
            used = [offset, old[SIZE], None, False]
            target[OFFSET] += old[SIZE]
            target[SIZE] -= old[SIZE]
            self._pieces.insert(i, used)
        used[FREE] = False
        used[STORAGE] = sid
        self._peak_used = max(self._peak_used, self.used_bytes)
        if self._log is not None:
            self._log += [offset, old[SIZE]]
        old[STORAGE] = None
        self.free(old[OFFSET])

    def _carve(self, offset, size):
        i = self._index_at(offset)
        if i is None or not self._pieces[i][FREE] or self._pieces[i][SIZE] < size:
            raise ValueError(f"move to offset {offset}: no free piece of {size} bytes there")
        target = self._pieces[i]
        if target[SIZE] == size:
            used = target
        else:
            used = [offset, size, None, False]
            target[OFFSET] += size
            target[SIZE] -= size
            self._pieces.insert(i, used)
        used[FREE] = False
        self._peak_used = max(self._peak_used, self.used_bytes)
        if self._log is not None:
            self._log += [offset, size]
        return used

    def _do_moves(self, moves, move):
        """Take every destination, copy (move callback), rebind, then free the old pieces;
        the log has each move done as (old, LOG_MOVE, new, size, sid), nothing else."""
        log, self._log = self._log, None
        try:
            self._relocate_all(moves, move, log)
        finally:
            self._log = log

    def _relocate_all(self, moves, move, log):
        # lowest destination first: moves packed into one free piece take it from its low end
        news = [None] * len(moves)
        for k in sorted(range(len(moves)), key=lambda k: moves[k][1]):
            news[k] = self._carve(moves[k][1], self._piece_of(moves[k][0])[SIZE])
        olds = []
        for (sid, dst), new in zip(moves, news):
            old = self._piece_of(sid)
            if move is not None and move(sid, old[OFFSET], dst) is False:
                self._storages[sid].movable = False
                olds.append(dst)
                continue
            olds.append(old[OFFSET])
            old[STORAGE] = None
            new[STORAGE] = sid
            if log is not None:
                log += [old[OFFSET], LOG_MOVE, dst, old[SIZE], sid]
            self._moves += 1
            self._bytes_moved += old[SIZE]
            self._move_cost += old[SIZE] * self.move_cost_per_byte
        for offset in olds:
            self.free(offset)

    def move(self, sid, offset):
        self._get(sid)
        self._relocate(_integer(sid, "storage id"), _nonnegative(offset, "offset"))

    def set_movable(self, sid, flag):
        self._get(sid).movable = bool(flag)

    @property
    def move_cost(self):
        return self.move_cost_per_byte

    @move_cost.setter
    def move_cost(self, value):
        rate = float(value)
        if rate != rate or rate < 0.0:
            raise ValueError(f"move_cost must be a number >= 0, got {value!r}")
        self.move_cost_per_byte = rate

    @property
    def room_price(self):
        return self._room_price

    @room_price.setter
    def room_price(self, value):
        price = _as_float(value)
        if not 0.0 <= price < math.inf:
            raise ValueError(f"room_price must be a finite number >= 0, got {value!r}")
        self._room_price = price

    @property
    def excess_weight(self):
        return self._excess_weight

    @excess_weight.setter
    def excess_weight(self, value):
        weight = _as_float(value)
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"excess_weight must be a number in [0, 1], got {value!r}")
        self._excess_weight = weight

    def _per(self, cost, covered, size):
        """A window's cost as coop's choice compares it (per byte freed, those beyond the
        request at excess_weight)."""
        return per_byte(cost, covered, size, self._excess_weight)

    def choose_plan(self, nbytes, policy, now):
        size = self._request(nbytes)
        victims = self._victims(size, self._policy(policy), _clock(now))
        self._open = False
        plan = self._plan
        return {"victims": victims, "moves": plan[3] if plan else [],
                "cost": plan[0] if plan else None, "start": plan[1] if plan else None,
                "pieces": plan[2] if plan else 0}

    def _evict_loop(self, size, nbytes, placement, policy, now, evict, sid, move=None):
        while True:
            offset = self._place(size, placement, sid, nbytes)
            if offset >= 0:
                return offset
            start = time.perf_counter()
            victims = self._victims(size, policy, now)
            self._search_time += time.perf_counter() - start
            self._searches += 1
            free = self._free_bytes()
            self._fragmentation_sum += free / self.capacity
            moves = self._plan_moves
            if not victims and not moves:
                self._failed += 1
                self._largest_ratio_sum += self._largest_free() / free if free else 1.0
                raise self._oom(size)
            if policy == "coop" and self._plan is not None and math.isfinite(self._plan[0]):
                self._room_price = self._plan[0] / size     # the room's price from now on
            taken, saved = self._open, self._taken
            self._open, self._taken = False, taken
            try:
                if moves:
                    self._do_moves(moves, move)
                sizes = [self._piece_of(v)[SIZE] for v in victims]
                if victims:
                    evict(list(victims))
            finally:
                self._taken = saved
            still = []
            self._open = taken     # a victim left resident is checked as the choice counted it
            for v, nbytes_v in zip(victims, sizes):
                piece = self._piece_of(v) if v in self._storages else None
                if piece is None and v in self._storages and self._storages[v].eq_class is None:
                    self._offloads += 1          # left for the owner's host tier
                    self._bytes_offloaded += nbytes_v
                elif piece is None:
                    self._evictions += 1
                    self._bytes_evicted += nbytes_v
                elif self._candidate(piece):
                    still.append(v)
            self._open = False
            # a victim the owner refused (made unevictable or pinned) is simply not chosen again
            if still:
                raise InternalError(f"the evict callback left storages {still} resident and evictable")
            if sid is not None and sid not in self._storages:
                raise ValueError(f"storage {sid} was removed during its own allocation")

    def stats(self):
        free = self._free_bytes()
        return {
            "capacity": self.capacity,
            "ideal": self.ideal,
            "used_bytes": self.capacity - free,
            "peak_used_bytes": self._peak_used,
            "free_bytes": free,
            "largest_free": self._largest_free(),
            "pieces": len(self._pieces),
            "free_pieces": sum(1 for p in self._pieces if p[FREE]),
            "evictions": self._evictions,
            "bytes_evicted": self._bytes_evicted,
            "searches": self._searches,
            "search_time": self._search_time,
            "fragmentation_rate":
                self._fragmentation_sum / self._searches if self._searches else 0.0,
            "failed_allocations": self._failed,
            "largest_free_ratio": self._largest_ratio_sum / self._failed if self._failed else 0.0,
            "window_moves": self._moves,
            "bytes_moved": self._bytes_moved,
            "move_cost": self._move_cost,
            "offloads": self._offloads,
            "bytes_offloaded": self._bytes_offloaded,
        }

    def check(self):
        """Verify every invariant from scratch; InternalError names the first one broken."""
        try:
            self._check()
        except AssertionError as broken:
            raise InternalError(f"reference arena invariant broken: {broken}") from None

    def _check(self):
        offset = 0
        previous_free = False
        bound = set()
        for p in self._pieces:
            assert p[OFFSET] == offset, f"piece at {p[OFFSET]} should start at {offset}"
            assert p[SIZE] > 0 and p[SIZE] % self.alignment == 0, f"bad size at {p[OFFSET]}"
            assert not (p[FREE] and previous_free), f"two adjacent free pieces at {p[OFFSET]}"
            if p[STORAGE] is not None:
                assert not p[FREE], f"free piece at {p[OFFSET]} is bound"
                assert p[STORAGE] in self._storages, f"piece at {p[OFFSET]}: unknown storage"
                assert p[STORAGE] not in bound, f"storage {p[STORAGE]} bound twice"
                bound.add(p[STORAGE])
            previous_free = p[FREE]
            offset += p[SIZE]
        assert offset == self._space, f"pieces cover {offset} of {self._space} bytes"
        assert self.used_bytes <= self.capacity, "more bytes used than the budget"
        for sid, st in self._storages.items():
            assert st.pins >= 0 and st.cost >= 0.0, f"storage {sid}: bad pins or cost"
            for n in st.neighbors:
                assert sid in self._storages[n].neighbors, f"storage {sid}: asymmetric neighbors"
            if st.eq_class is not None:
                assert sid not in bound, f"resident storage {sid} is in a class"
                assert sid in self._classes[st.eq_class][0], f"storage {sid} missing from its class"
        for cid, (members, cost) in self._classes.items():
            assert members, f"class {cid} is empty"
            for m in members:
                assert self._storages[m].eq_class == cid, f"class {cid} lists storage {m}"
            total = sum(self._storages[m].cost for m in members)
            assert math.isclose(cost, total, rel_tol=1e-9, abs_tol=1e-9), f"class {cid} cost"


class CallbackOwner:
    """The model of coop._core.CallbackOwner: an arena owner evicting through callback(list of
    storage ids) under core policy `policy`, at clock `now` (writable)."""

    def __init__(self, callback, policy):
        if not callable(callback):
            raise TypeError(f"evict must be callable, got {callback!r}")
        if not isinstance(policy, str) or policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.callback = callback
        self.policy = policy
        self.now = 0.0
        self.lock = None


def _clock(now):
    now = float(now)
    if not math.isfinite(now):
        raise ValueError(f"a clock (now, last access) must be a finite number, got {now!r}")
    return now
