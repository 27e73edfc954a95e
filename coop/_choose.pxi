# The victim choice (included by _core.pyx): the one-at-a-time loops of dtr, dte, lru and size,
# and coop's windows, found by ONE two-pointer scan (scan_windows) over scratch arrays that fill
# sweeps from the scan runs. The evict-only window, the moving window (MovePlanner) and the
# compaction window differ only in what an entry costs and frees.


cdef inline double _stale(double last_access, double now) noexcept:
    cdef double s = now - last_access
    # max(s, 1.0), and 1.0 for NaN (an infinite clock minus itself): a score stays a number
    return s if s > 1.0 else 1.0


cdef inline double _per(double cost, size_t covered, size_t size, double weight) noexcept:
    """A window's cost as the choice compares it (docs/core.md, "The bytes beyond the
    request"): its cost over size + weight * (covered - size), the bytes it frees with those
    beyond the request counted at weight; with weight 0.0, its cost itself (not divided)."""
    if weight == 0.0:
        return cost
    return cost / (<double>size + weight * <double>(covered - size))


cdef struct Best:
    # the cheapest window a scan without a planner found
    size_t lo           # its entries are lo..end-1
    size_t end
    double cost         # its cost (running sums)
    double sum          # the running sum p_right at it (what bounds the sums' rounding)
    bint found


cdef struct Ranked:
    # the moving window's first pass: the window of least bound, and the least bound of the
    # other windows that start before it and of those that start after it, over the windows
    # whose forced movers do not outnumber the free pieces outside them (no other has a plan)
    size_t lo           # the window of least bound (ties: the first): entries lo..end-1
    size_t end
    double least        # ... its bound
    bint found
    double before       # the least bound of the other windows that start before it
    double after        # ... of those that start after it
    bint unsure         # a cost that is not a number was seen: the bounds say nothing
    int bins            # the free pieces (entries of kind K_FREE) in all
    double* lbs         # each start's bound (NaN: no window with a plan), up to next - 1
    size_t next         # the first start without a bound written yet


cdef struct Least:
    # the moving window's quick first pass: Ranked's window of least bound and least bounds
    # before and after it, over every window (its plan possible or not), without counts
    size_t lo
    size_t end
    double least
    bint found
    double before
    double after
    bint unsure
    size_t largest      # the largest free piece (flags are the scan's: a piece that must move
                        # and that no free piece holds is a wall)


ctypedef Best* BestAt
ctypedef Ranked* RankedAt
ctypedef Least* LeastAt

# The scan's visitors: the evict-only and compaction windows keep the cheapest (a Best), the
# moving window's first passes the window of least bound and bounds of the others (a Least,
# quick: every window, nothing counted or written; a Ranked: the windows with a plan, each
# start's bound written), its full pass hands each window to the planner, whose movers' costs
# sum apart. A fused type, so each
# gets its own compiled scan with no test of the others' in the inner loop.
ctypedef fused Visitor:
    BestAt
    RankedAt
    LeastAt
    MovePlanner


cdef enum:
    # the moving window's entry kinds (MovePlanner.kind), bits
    K_KEEP = 1         # not a wall
    K_MOVER = 2        # its cheaper way out is a move: its cost sums in the movers' lane
    K_FORCED = 4       # it must move (movable, not a candidate)
    K_FREE = 8         # a free piece
    K_COSTLY = 16      # its way out costs more than 0.0 (a window of none costs exactly 0.0)
    K_TAKES = K_FORCED | K_FREE   # a mask (never both bits): the entry takes a free piece,
                                  # its own or, a forced mover, a destination outside


cdef unsigned char _KINDS[32]


cdef void _make_kinds() noexcept:
    """_KINDS[flags | fits << 3 | cheaper << 4]: an entry's kind but for K_COSTLY, from its
    ScanRun flags (W_*), whether a free piece holds it (fits) and whether its move costs less
    than its eviction (cheaper): a movable piece that fits moves when it is not a candidate
    (forced) or when its move is cheaper; a piece neither free, candidate nor movable is a
    wall."""
    cdef int i
    cdef unsigned char free, cand, movable, mover
    for i in range(32):
        free = (i & W_FREE) != 0
        cand = (i & W_CANDIDATE) != 0
        movable = (i & W_MOVABLE) != 0 and (i >> 3) & 1
        mover = movable and (not cand or (i >> 4) & 1)
        _KINDS[i] = ((free or cand or movable) * K_KEEP | mover * K_MOVER
                     | (mover and not cand) * K_FORCED | free * K_FREE)


_make_kinds()


cdef inline unsigned char _first_kind(unsigned char flags, size_t size, size_t largest) noexcept:
    """An entry's kind for the moving window's first passes (K_KEEP, K_FORCED, K_FREE): by its
    flags and whether a free piece (the largest: largest) holds it."""
    return _KINDS[flags | (size <= largest) << 3]


cdef inline void scan_windows(size_t total, size_t size, double* value, double* lane,
                              size_t* cover, unsigned char* flags, unsigned char keep,
                              double weight, Visitor out) noexcept:
    """The two-pointer scan: from each start lo, the smallest window lo..j that covers size (j
    grows until it covers, then lo advances). An entry with no flag of keep is a wall; an entry
    costs value and frees cover bytes. p_right - p_left is the running-sum cost of docs/core.md:
    both restart at a wall only, so they are the reference's sums bit for bit. With a planner,
    flags are kinds (K_*), the movers' costs are in lane (and 0.0 in value) and sum apart, in
    q_right - q_left, the window's movers, costly entries and forced movers plus free pieces
    (taken: a window has a plan only if taken <= the free pieces in all) are counted, and each
    window goes to planner.visit; with a Ranked (the counting first pass, lane unused), it
    keeps the window of least bound and the least bounds before and after it; with a Least
    (the quick first pass: flags are the scan's W_* bits, read with the largest free piece),
    the same over every window; with a Best (lane unused), the cheapest window (ties: the
    first). weight: each window's cost (and bound) is compared per byte it frees, those
    beyond the request counted at weight (_per; 0.0: the cost itself)."""
    cdef size_t j, lo = 0, covered = 0
    cdef double cost, lb, p_left = 0.0, p_right = 0.0, q_left = 0.0, q_right = 0.0
    cdef int taken = 0, movers = 0, costly = 0
    cdef unsigned char f
    # the Ranked's fields in locals (a store through its lbs could alias them: the compiler
    # would reload them after every window's store), a Best's too (least: its key)
    cdef double least = INFINITY, before = INFINITY, after = INFINITY
    cdef bint found = False, unsure = False
    cdef double* lbs = NULL
    cdef int bins = 0
    cdef size_t least_lo = 0, least_end = 0
    cdef double best_cost = INFINITY, best_sum = 0.0
    if Visitor is RankedAt:
        lbs = out.lbs
        bins = out.bins
    for j in range(total):
        if Visitor is LeastAt:
            f = _first_kind(flags[j], cover[j], out.largest)
        else:
            f = flags[j]
        if not (f & keep):
            if Visitor is LeastAt or Visitor is RankedAt:
                # the stretch ends: its sums are numbers or the bounds say nothing (its every
                # window's cost and bound are then numbers)
                unsure = unsure or not (p_right - p_right == 0.0)
            if Visitor is RankedAt:
                while lo <= j:          # starts lo..j have no window
                    lbs[lo] = NAN
                    lo += 1
            p_left = p_right = q_left = q_right = 0.0
            covered = 0
            taken = movers = costly = 0
            lo = j + 1
            continue
        if Visitor is MovePlanner:
            # no branch: an entry is 0.0 in the other lane, and adding 0.0 leaves a running
            # sum (>= 0, or NaN) as it is
            p_right = p_right + value[j]
            q_right = q_right + lane[j]
            movers += (f & K_MOVER) != 0
            taken += (f & K_TAKES) != 0
            costly += (f & K_COSTLY) != 0
        elif Visitor is LeastAt:
            p_right = p_right + value[j]
        elif Visitor is RankedAt:
            p_right = p_right + value[j]
            taken += (f & K_TAKES) != 0
            costly += value[j] > 0.0      # (NaN: the stretch is unsure anyway)
        else:
            p_right = p_right + value[j]
        covered += cover[j]
        while covered >= size:
            if Visitor is MovePlanner:
                out.visit(lo, p_left, p_right, q_left, q_right, taken, movers, costly == 0,
                          covered)
                f = flags[lo]
                p_left = p_left + value[lo]
                q_left = q_left + lane[lo]
                movers -= (f & K_MOVER) != 0
                taken -= (f & K_TAKES) != 0
                costly -= (f & K_COSTLY) != 0
            elif Visitor is BestAt:
                cost = p_right - p_left
                lb = _per(cost, covered, size, weight)
                # the first window counts even when its cost is not a number (costs so large
                # their sums overflow: inf - inf), as the reference's
                if lb < least or not found:
                    found = True
                    best_cost = cost
                    least = lb
                    least_lo = lo
                    least_end = j + 1
                    best_sum = p_right
                p_left = p_left + value[lo]
            else:
                # the first passes: each window's bound, below the exact sum (MovePlanner.visit)
                if Visitor is LeastAt:
                    # every window (a window of costless entries: below 0.0 here)
                    lb = _per((p_right - p_left) - p_right * 1e-10, covered, size, weight)
                else:
                    # exactly 0.0 without a costly entry; a window whose forced movers
                    # outnumber the free pieces outside it has no plan (the full pass drops it
                    # too): it neither is the best nor bounds others
                    lb = _per((p_right - p_left) - p_right * 1e-10, covered, size, weight) \
                        if costly else 0.0
                    lb = lb if taken <= bins else NAN
                    lbs[lo] = lb
                    # (sums that are not numbers are found where each stretch ends, above)
                    f = flags[lo]
                    taken -= (f & K_TAKES) != 0
                    costly -= value[lo] > 0.0
                if lb < after:
                    if lb < least or not found:
                        # every window seen so far starts before this one
                        if found:
                            before = min(before, min(after, least))
                        after = INFINITY
                        found = True
                        least = lb
                        least_lo = lo
                        least_end = j + 1
                    else:
                        after = lb
                p_left = p_left + value[lo]
            covered -= cover[lo]
            lo += 1
    if Visitor is BestAt:
        out.found = found
        out.cost = best_cost
        out.lo = least_lo
        out.end = least_end
        out.sum = best_sum
    if Visitor is LeastAt or Visitor is RankedAt:
        out.unsure = unsure or not (p_right - p_right == 0.0)
        out.found = found
        out.least = least
        out.before = before
        out.after = after
        out.lo = least_lo
        out.end = least_end
    if Visitor is RankedAt:
        out.next = lo


@cython.final
cdef class Chooser:
    """What each policy evicts (and, with moving on, moves) for a request."""

    def __cinit__(self, PieceTable pieces, Storages storages, bint ideal):
        self.pieces = pieces
        self.storages = storages
        self.ideal = ideal
        self.moves_if_blocked = False
        self.excess_weight = 0.0
        self.planner = MovePlanner(self)

    cdef void choose(self, size_t size, int policy, double now, double rate,
                     vector[int]& victims, MovePlan* plan) noexcept:
        """The policy's victims for a request of size (rounded), and its plan: with moving on
        (rate finite), coop's window may move pieces too, each piece leaving by the cheaper of
        its eviction and its move; with moves_if_blocked, only when no window of free pieces
        and candidates covers the request."""
        victims.clear()
        plan.moves.clear()
        plan.dst.clear()
        plan.cost = INFINITY
        plan.start = -1
        plan.pieces = 0
        cdef size_t total, lo, end
        cdef double cost, ignored, t0, t1, t2
        cdef bint moving = isfinite(rate) and not self.ideal, found
        if policy == P_NONE:
            return
        if policy == P_COOP:
            # the evict-only window: the choice without moves, and with moves_if_blocked
            # wherever it exists; else the moving window
            if not moving or self.moves_if_blocked:
                t0 = _monotonic()
                total = self.fill(now, False)
                t1 = _monotonic()
                found = self.evict_window(size, total, &lo, &end, &cost, &ignored)
                t2 = _monotonic()
                self.phases.fill += t1 - t0
                self.phases.scan += t2 - t1
                if found:
                    self.take_window(lo, end, cost, victims, plan)
                    return
            if moving:
                self.planner.choose(size, now, rate, victims, plan)
            return
        self.choose_one(size, policy, now, victims)

    cdef void choose_one(self, size_t size, int policy, double now, vector[int]& victims) noexcept:
        """The loop policies: the candidate of lowest score (ties: lowest offset); the demoted
        ones (Arena.c_demote) before any other, ranked as if untouched since the start."""
        cdef ScanRuns runs = self.pieces.runs
        cdef Piece* at = self.pieces.at.data()
        cdef int r = runs.first, k
        cdef int best = -1
        cdef double best_score = INFINITY
        cdef double score, m, last
        cdef bint demoted, best_demoted = False
        cdef ScanRun* run
        cdef Piece* p
        while r >= 0:
            run = &runs.runs[r]
            for k in range(run.count):
                if not (run.flags[k] & W_CANDIDATE):
                    continue
                last = run.last_access[k]
                demoted = last == -INFINITY
                if demoted:
                    last = 0.0      # ranked among the demoted as if untouched since the start
                if policy == P_DTR:
                    score = run.cprime[k] / (<double>run.size[k] * _stale(last, now))
                elif policy == P_DTE:
                    m = <double>run.size[k]
                    p = &at[run.piece[k]]
                    # an ideal arena has no neighbors in memory: nothing adjacent counts
                    if not self.ideal and p.prev >= 0 and at[p.prev].free:
                        m = m + at[p.prev].size
                    if not self.ideal and p.next >= 0 and at[p.next].free:
                        m = m + at[p.next].size
                    score = run.cprime[k] / (m * _stale(last, now))
                elif policy == P_LRU:
                    score = last
                else:
                    score = 1.0 / <double>run.size[k]
                # a demoted candidate (Arena.c_demote) before any other
                if best < 0 or (demoted and not best_demoted) \
                        or (demoted == best_demoted and score < best_score):
                    best = run.piece[k]
                    best_score = score
                    best_demoted = demoted
            r = run.next
        if best >= 0:
            victims.push_back(at[best].storage)

    cdef size_t fill(self, double now, bint pieces) noexcept:
        """Sweep the scan runs into the flat scratch arrays, address order: h = c' / staleness
        (in a branch-free loop the compiler vectorises), sizes, flags and, with pieces, the
        piece indices. Returns the number of entries. (With moves, MovePlanner.fill sweeps
        them, mv and the moving window's entries included.)"""
        cdef size_t total = <size_t>self.pieces.count
        if self.h.size() < total:
            self.h.resize(total)
            self.size.resize(total)
            self.flags.resize(total)
        if pieces and self.piece.size() < total:
            self.piece.resize(total)
        cdef double* hs = self.h.data()
        cdef size_t* ss = self.size.data()
        cdef unsigned char* fs = self.flags.data()
        cdef int* ps = self.piece.data()
        cdef ScanRuns runs = self.pieces.runs
        cdef ScanRun* run
        cdef int r = runs.first, k
        cdef size_t base = 0
        cdef double s
        while r >= 0:
            run = &runs.runs[r]
            for k in range(run.count):
                s = now - run.last_access[k]
                s = s if s > 1.0 else 1.0           # _stale, in the form that vectorises
                hs[base + k] = run.cprime[k] / s    # free pieces mirror c' = 0
            memcpy(&ss[base], run.size, run.count * sizeof(size_t))
            memcpy(&fs[base], run.flags, run.count)
            if pieces:
                memcpy(&ps[base], run.piece, run.count * sizeof(int))
            base += run.count
            r = run.next
        return total

    cdef bint evict_window(self, size_t size, size_t total, size_t* best_lo, size_t* best_end,
                           double* best_cost, double* best_sum) noexcept:
        """The cheapest window of free and candidate entries (fill's arrays) that covers size:
        entries [best_lo, best_end), its cost (running sums) and the running sum at it (what
        bounds the sums' rounding); False when there is none."""
        cdef Best best
        scan_windows(total, size, self.h.data(), NULL, self.size.data(), self.flags.data(),
                     W_FREE | W_CANDIDATE, self.excess_weight, &best)
        if best.found:
            best_lo[0] = best.lo
            best_end[0] = best.end
            best_cost[0] = best.cost
            best_sum[0] = best.sum
        return best.found

    cdef void take_window(self, size_t best_lo, size_t best_end, double best_cost,
                          vector[int]& victims, MovePlan* plan) noexcept:
        """Make entries [best_lo, best_end) the plan: its cost, length, start and victims (its
        candidates, found again in the scan runs)."""
        cdef ScanRuns runs = self.pieces.runs
        cdef int r = runs.first, k
        cdef size_t base = 0, j
        cdef ScanRun* run
        plan.cost = best_cost
        plan.pieces = <Py_ssize_t>(best_end - best_lo)
        while base + <size_t>runs.runs[r].count <= best_lo:
            base += runs.runs[r].count
            r = runs.runs[r].next
        run = &runs.runs[r]
        k = <int>(best_lo - base)
        plan.start = <Py_ssize_t>self.pieces.at[run.piece[k]].offset
        for j in range(best_lo, best_end):
            if run.flags[k] & W_CANDIDATE:
                victims.push_back(self.pieces.at[run.piece[k]].storage)
            k += 1
            if k == run.count and run.next >= 0:
                run = &runs.runs[run.next]
                k = 0

    cdef bint compact_window(self, size_t size, double now, double rate, size_t* best_lo,
                             size_t* best_end) noexcept:
        """The compaction window (docs/core.md, "Moving"): the cheapest run of entries, none a
        wall, whose free and candidate bytes cover size; candidates cost h, movers (movable,
        not candidates) a copy (on h's scale) and free no bytes. Entries [best_lo, best_end)
        of MovePlanner.fill's arrays; False when there is none."""
        cdef size_t total = self.planner.fill(now, rate, 0.0, True, True, 0), j
        if self.value.size() < total:
            self.value.resize(total)
            self.cover.resize(total)
        cdef double* hs = self.h.data()
        cdef size_t* ss = self.size.data()
        cdef unsigned char* fs = self.flags.data()
        cdef double* ms = self.mv.data()
        cdef double* vs = self.value.data()
        cdef size_t* cs = self.cover.data()
        for j in range(total):
            if fs[j] & (W_FREE | W_CANDIDATE):
                vs[j] = hs[j]
                cs[j] = ss[j]
            else:             # a mover (or a wall): stays in the window, its bytes cost a copy
                vs[j] = ms[j]
                cs[j] = 0
        cdef Best best
        scan_windows(total, size, vs, NULL, cs, fs, W_FREE | W_CANDIDATE | W_MOVABLE, 0.0, &best)
        if best.found:
            best_lo[0] = best.lo
            best_end[0] = best.end
        return best.found
