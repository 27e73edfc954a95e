# The moving window (included by _core.pyx): coop's window when pieces may move, as a MovePlan.
# docs/core.md, "Moving", says what is chosen and why the search finds it.


cdef bint _fits_with(vector[size_t]& chosen, size_t x, vector[size_t]& outb) noexcept:
    """Whether the sizes chosen (largest first) plus x have distinct destinations among outb
    (largest first): the k-th largest size fits the k-th largest destination, for every k."""
    cdef size_t n = chosen.size() + 1, k, i = 0, y
    cdef bint placed = False
    if n > outb.size():
        return False
    for k in range(n):
        if not placed and (i == chosen.size() or x > chosen[i]):
            y = x
            placed = True
        else:
            y = chosen[i]
            i += 1
        if y > outb[k]:
            return False
    return True


cdef void _insert_desc(vector[size_t]& chosen, size_t x) noexcept:
    cdef size_t i = 0
    while i < chosen.size() and chosen[i] >= x:
        i += 1
    chosen.insert(chosen.begin() + i, x)


cdef inline bint _plain(ScanRun* run) noexcept:
    """Whether run holds no free and no candidate entry (walls and forced movers only): eight
    flags at a time, none past its count read."""
    cdef int k
    cdef uint64_t word
    for k in range(0, run.count & ~7, 8):
        memcpy(&word, &run.flags[k], 8)
        if word & <uint64_t>0x0303030303030303ULL:
            return False
    for k in range(run.count & ~7, run.count):
        if run.flags[k] & (W_FREE | W_CANDIDATE):
            return False
    return True


cdef inline void _ways_out(double* vs, unsigned char* ks, double* cprime, double* last,
                           double* dsize, double* mlimit, unsigned char* flags, int n,
                           double now, double rate, double price, double largest) noexcept:
    """MovePlanner.fill's sweep of n scan entries (from cprime, last, dsize, mlimit and flags:
    a run's arrays, from its first entry swept): each entry's cheapest way out into vs, and
    its kind for the counting pass into ks (NULL: none, the quick pass reads the flags). No
    branch in the loop: the compiler vectorises it, 16 entries at a time (ks is tested once,
    outside)."""
    cdef int k
    cdef double s, c, m, rt
    cdef unsigned char fl, free, cand, movable, mover, fits
    if ks != NULL:
        for k in range(n):
            c = cprime[k]               # a free piece's is 0
            s = now - last[k]
            s = s if s > 1.0 else 1.0       # _stale, in the form that vectorises
            rt = price * dsize[k] * s if price > 0.0 else 0.0
            m = dsize[k] * rate + rt     # the copy, and the room it takes
            fl = flags[k]
            free = (fl & W_FREE) != 0
            cand = (fl & W_CANDIDATE) != 0
            fits = dsize[k] <= largest
            movable = ((fl & W_MOVABLE) != 0) & fits
            # a mover: movable, held by a free piece, not a candidate or cheaper to move
            # (_mlimit)
            mover = fits & (m < mlimit[k])
            vs[k] = (m if mover else c) / s
            # the first pass's kind: not a wall, a forced mover, a free piece
            ks[k] = ((free | cand | movable) * K_KEEP
                     | (movable & (cand ^ 1)) * K_FORCED | free * K_FREE)
    else:
        for k in range(n):
            c = cprime[k]
            s = now - last[k]
            s = s if s > 1.0 else 1.0
            rt = price * dsize[k] * s if price > 0.0 else 0.0
            m = dsize[k] * rate + rt
            mover = (dsize[k] <= largest) & (m < mlimit[k])   # doubles only
            vs[k] = (m if mover else c) / s


@cython.final
cdef class MovePlanner:
    """Chooses the window whose pieces leave by eviction or by moving, whichever is cheaper."""

    def __cinit__(self, Chooser scan):
        self.scan = scan

    cdef void choose(self, size_t size, double now, double rate, vector[int]& victims,
                     MovePlan* plan) noexcept:
        """Each piece of a window leaves it by the cheaper of eviction (h) and moving (its move
        on h's scale, mv); a movable piece that is not a candidate must move, a piece that is
        neither is a wall, and so is one that must move but is larger than every free piece.
        v = that cheaper cost is a lower bound of the piece's share, so the two-pointer scan
        over v finds, from each start, the smallest window that covers the request (a window's
        exact plan only grows dearer and less feasible as the window grows) and its bound;
        then plans are evaluated best-first (docs/core.md, "Moving")."""
        cdef Chooser scan = self.scan
        cdef double t0 = _monotonic(), t1, t2
        cdef bint decided, quickly = self.undecided <= 0.25
        cdef size_t total = self.fill(now, rate, self.room_price, False, not quickly, size)
        t1 = _monotonic()
        scan.phases.entries += total
        scan.phases.pieces += scan.pieces.count
        cdef double* vs = self.v.data()
        cdef size_t* ss = scan.size.data()
        sort(self.bins.begin(), self.bins.end())   # largest first, then lowest address
        self.size = size
        # first pass: the window of least bound; when no other window can beat its plan (those
        # that start before it: nor tie it, a tie going to the lowest start), it is the choice
        # (docs/core.md, "Moving": a search that stays cheap). Where recent searches were
        # mostly decided so, a quick pass first: the least bounds over every window, without
        # counting each one's movers and free pieces nor writing each start's bound; it decides
        # when its window has a plan and no other bound is below that plan's cost (windows
        # without a plan only make that test harder to pass)
        cdef Least quick
        cdef Ranked first
        cdef size_t j
        cdef int taken = 0
        cdef unsigned char* ks = self.kind.data()
        cdef unsigned char* fs = scan.flags.data()
        self.best_end = 0
        self.best_moved.clear()
        decided = False
        t2 = t1
        if quickly:
            # (its kinds from the flags and whether a free piece holds each entry, as it goes)
            quick.largest = self.largest
            scan_windows(total, size, vs, NULL, ss, fs, K_KEEP, scan.excess_weight, &quick)
            t2 = _monotonic()
            if quick.found and not quick.unsure:
                for j in range(quick.lo, quick.end):
                    taken += (_first_kind(fs[j], ss[j], self.largest) & K_TAKES) != 0
                if taken <= <int>self.bins.size():
                    self.evaluate(quick.lo)
                    decided = self.best_end != 0 and quick.before > self.best_cost \
                        and quick.after >= self.best_cost
                    scan.phases.quick += decided
        scan.phases.moving += 1
        scan.phases.fill += t1 - t0
        scan.phases.scan += t2 - t1
        if not decided:
            # the first pass proper: bounds over the windows with a plan, each start's written
            # for best-first
            self.best_end = 0
            self.best_moved.clear()
            t1 = _monotonic()
            if quickly:                 # the first pass's kinds, which fill did not write
                for j in range(total):
                    ks[j] = _first_kind(fs[j], ss[j], self.largest)
                self.done.assign(total, 0)     # (details wrote full kinds for some: again)
                self.detailed = False
            first.bins = <int>self.bins.size()
            first.lbs = self.lbs.data()
            scan_windows(total, size, vs, NULL, ss, ks, K_KEEP, scan.excess_weight, &first)
            t1 = _monotonic() - t1
            scan.phases.scan += t1        # a scan's time, not the plans'
            scan.phases.plan -= t1
            if first.found and not first.unsure:
                self.evaluate(first.lo)
            decided = self.best_end != 0 and first.before > self.best_cost \
                and first.after >= self.best_cost
            if not decided:
                if first.found and not first.unsure:
                    # the first pass's bounds (one running sum each, no tighter than the full
                    # pass's, never above a plan's): plans best-first from them
                    self.next_lo = first.next      # best_first writes NaN from there on
                    self.least_lo = first.lo
                    self.least = first.least
                    self.best_first(total)
                else:
                    self.full(total)
        self.undecided = self.undecided * 0.875 + (0.0 if decided else 0.125)
        if self.best_end != 0:
            plan.cost = self.best_cost
            plan.start = <Py_ssize_t>scan.pieces.at[scan.piece[self.best_lo]].offset
            plan.pieces = <Py_ssize_t>(self.best_end - self.best_lo)
            self.destinations(self.best_lo, self.best_end, self.best_moved, victims, plan)
        scan.phases.plan += _monotonic() - t2

    cdef bint skip_runs(self, size_t request) noexcept:
        """For a request of request bytes, the parts of the scan runs a window with a plan may
        reach, in address order, as segments (seg_run, seg_lo, seg_hi: run seg_run's entries
        seg_lo..seg_hi-1; seg_run -1: a placeholder, one wall entry for what is skipped).
        False when nothing is skipped: fill then sweeps every run whole, reading no segment
        (docs/core.md, "Moving": runs no window reaches are not swept).

        Only where the request is above the free bytes: a window of forced movers alone then
        has no plan (its movers would need destinations holding more bytes than are free).
        Each of the F free pieces takes one of a window's free entries or forced movers, so a
        window with a plan holds at most F forced movers. A run with no free or candidate entry
        holds walls and forced movers only; in a stretch of such runs, an entry more than F + 1
        entries from both ends is in no window with a plan. So the stretch's first F + 1 and
        last F + 1 entries are swept and a placeholder stands for those between them."""
        cdef ScanRuns runs = self.scan.pieces.runs
        cdef PieceTable table = self.scan.pieces
        cdef cset[SizeOffset].iterator it = table.free_index.begin()
        cdef size_t free_bytes = 0, i, a, b, n, entries, need, j, c
        cdef ScanRun* run
        cdef int r
        cdef size_t keep = <size_t>table.n_free + 1
        cdef bint any_skipped = False
        self.walk.clear()
        self.skipped.clear()
        self.seg_run.clear()
        self.seg_lo.clear()
        self.seg_hi.clear()
        if request == 0:
            return False
        while it != table.free_index.end():
            free_bytes += deref(it).first
            preincrement(it)
        if request <= free_bytes:
            return False
        # is a stretch of plain runs long enough to skip a part of? (in most searches not:
        # then nothing is built, and fill sweeps whole runs)
        entries = 0
        r = runs.first
        while r >= 0:
            run = &runs.runs[r]
            entries = entries + <size_t>run.count if _plain(run) else 0
            if entries > 2 * keep:
                break
            r = run.next
        if entries <= 2 * keep:
            return False
        r = runs.first
        while r >= 0:
            self.walk.push_back(r)
            self.skipped.push_back(_plain(&runs.runs[r]))
            r = runs.runs[r].next
        n = self.walk.size()
        i = 0
        while i < n:
            if not self.skipped[i]:
                self._segment(self.walk[i], 0, runs.runs[self.walk[i]].count)
                i += 1
                continue
            a = i
            entries = 0
            while i < n and self.skipped[i]:
                entries += <size_t>runs.runs[self.walk[i]].count
                i += 1
            b = i                       # the stretch is runs a..b-1
            if entries <= 2 * keep:
                for j in range(a, b):
                    self._segment(self.walk[j], 0, runs.runs[self.walk[j]].count)
                continue
            any_skipped = True
            # its first keep entries
            need = keep
            j = a
            while need > 0:
                c = <size_t>runs.runs[self.walk[j]].count
                self._segment(self.walk[j], 0, <int>min(c, need))
                need -= min(c, need)
                j += 1
            self._segment(-1, 0, 0)
            # its last keep entries: back from the end to where they start, then forward
            need = keep
            j = b
            while True:
                j -= 1
                c = <size_t>runs.runs[self.walk[j]].count
                if c >= need:
                    break
                need -= c
            self._segment(self.walk[j], <int>(c - need), <int>c)
            for j in range(j + 1, b):
                self._segment(self.walk[j], 0, runs.runs[self.walk[j]].count)
        return any_skipped

    cdef inline void _segment(self, int r, int lo, int hi) noexcept:
        self.seg_run.push_back(r)
        self.seg_lo.push_back(lo)
        self.seg_hi.push_back(hi)

    cdef size_t fill(self, double now, double rate, double price, bint costs,
                     bint kinds, size_t request) noexcept:
        """Chooser.fill's sweep for this window: each entry's cheapest way out, v (a movable
        piece that is not a candidate must move, a candidate moves when its move costs less
        than its eviction; a piece no free piece holds cannot move, whatever the window), its
        kind for the first pass (K_KEEP, K_FORCED, K_FREE), the scan's sizes, and the free
        entries in bins; with costs, every entry's details too (full kind, flags, piece, h and
        mv; else details(lo, end) writes them for the entries a plan or bound reads). Returns
        the number of entries. With request (0: none), the runs no window with a plan for it
        reaches are not swept: one entry, a wall, stands for each stretch of them (skip_runs).

        A move's way out is its copy and the room it takes: mv = (size * rate + price * size *
        staleness) / staleness, price the room's per byte (docs/core.md, "One scale"; 0.0 for
        the compaction window, whose movers take no room outside it). One division per entry:
        a piece's two ways out share its staleness, so v is the cheaper numerator (c', or the
        move's) over it, bit for bit the cheaper of the two quotients (rounding is monotone).
        Whether the move is the cheaper way compares the numerators: where the quotients round
        to one value it says move, at no cost to v."""
        cdef Chooser scan = self.scan
        cdef size_t total = <size_t>scan.pieces.count
        self.largest = scan.pieces.largest_free()
        cdef double largest = <double>self.largest      # sizes are far below 2^53: exact
        if scan.h.size() < total:
            scan.h.resize(total)
            scan.size.resize(total)
            scan.flags.resize(total)
        if scan.piece.size() < total:
            scan.piece.resize(total)
        if scan.mv.size() < total:
            scan.mv.resize(total)
        self.v.resize(total + RUN_LEN)        # the loops' run-on past the last entry
        self.kind.resize(total + RUN_LEN)
        self.lbs.resize(total)
        self.bins.clear()
        self.run_at.clear()
        self.run_base.clear()
        self.run_k0.clear()
        self.run_k1.clear()
        self.now = now
        self.rate = rate
        self.price = price
        cdef double* vs = self.v.data()
        cdef unsigned char* ks = self.kind.data()
        cdef ScanRuns runs = scan.pieces.runs
        cdef ScanRun* run
        cdef int r = runs.first, k
        cdef size_t base = 0
        cdef uint64_t word
        cdef int i
        cdef size_t seg = 0, n_seg = 0
        cdef int k0 = 0, k1 = 0, n
        cdef bint skipping = self.skip_runs(request)
        if skipping:
            n_seg = self.seg_run.size()
        while True:
            if skipping:
                if seg == n_seg:
                    break
                r = self.seg_run[seg]
                k0 = self.seg_lo[seg]
                k1 = self.seg_hi[seg]
                seg += 1
                if r < 0:
                    # a placeholder: one wall for the entries no window with a plan reaches
                    self.run_at.push_back(-1)
                    self.run_base.push_back(base)
                    self.run_k0.push_back(0)
                    self.run_k1.push_back(1)
                    vs[base] = 0.0
                    ks[base] = 0
                    scan.flags[base] = 0
                    scan.size[base] = 0
                    base += 1
                    continue
                run = &runs.runs[r]
            else:
                if r < 0:
                    break
                run = &runs.runs[r]
                k0 = 0
                k1 = run.count
            self.run_at.push_back(r)
            self.run_base.push_back(base)
            self.run_k0.push_back(k0)
            self.run_k1.push_back(k1)
            # entries k0..k1-1 of the run (all of it, or an end of a stretch skip_runs skips)
            # go to base..: the sweep runs on to a multiple of 16 within the run (its unused
            # slots hold stale numbers, and the next entries, written after, replace what they
            # give) so that a whole run's entries take no scalar tail
            n = k1 - k0
            _ways_out(&vs[base], &ks[base] if kinds else NULL, &run.cprime[k0],
                      &run.last_access[k0], &run.dsize[k0], &run.mlimit[k0], &run.flags[k0],
                      min((n + 15) & ~15, RUN_LEN - k0), now, rate, price, largest)
            if not kinds:
                memcpy(&scan.flags[base], &run.flags[k0], n)
            memcpy(&scan.size[base], &run.size[k0], n * sizeof(size_t))
            # free pieces are few: eight flags at a time (aligned), those with a free one
            # looked into
            for k in range(k0 & ~7, k1, 8):
                memcpy(&word, &run.flags[k], 8)
                if word & <uint64_t>0x0101010101010101ULL:
                    for i in range(max(k, k0), min(k + 8, k1)):
                        if run.flags[i] & W_FREE:
                            self.bins.push_back(SizeOffset(SIZE_MAX - run.size[i],
                                                           base + <size_t>(i - k0)))
            base += <size_t>n
            if not skipping:
                r = run.next
        total = base
        self.total = total
        self.done.assign(total, 0)
        self.detailed = False
        if costs:
            self.details(0, total)
        return total

    cdef void window_details(self, size_t lo) noexcept:
        """The details of the smallest window from lo that covers the request, before a bound
        or a plan reads them (nothing to do once every entry's are written)."""
        cdef size_t end = lo, covered = 0
        cdef size_t* ss = self.scan.size.data()
        if self.detailed:
            return
        while covered < self.size:
            covered += ss[end]
            end += 1
        self.details(lo, end)

    cdef void details(self, size_t lo, size_t end) noexcept:
        """Entries lo..end-1's kind (K_* bits: _KINDS by the flags, whether a free piece holds
        the entry and whether its move is the cheaper way out, as fill decides it, and
        K_COSTLY where v is above 0.0), flags, piece, h = c' / staleness and mv (fill's), bit
        for bit as a sweep would compute them; each entry once per search (done), however
        many windows read it."""
        cdef ScanRuns runs = self.scan.pieces.runs
        cdef double* hs = self.scan.h.data()
        cdef double* ms = self.scan.mv.data()
        cdef double* vs = self.v.data()
        cdef unsigned char* ks = self.kind.data()
        cdef unsigned char* done = self.done.data()
        cdef unsigned char* fs = self.scan.flags.data()
        cdef int* ps = self.scan.piece.data()
        cdef size_t i, base, j
        cdef ScanRun* run
        cdef double s, m
        cdef int k
        if lo >= end:
            return
        self.detailed = self.detailed or (lo == 0 and end == self.total)
        # the run of entry lo: the last whose first entry is at or below it
        i = <size_t>(upper_bound(self.run_base.begin(), self.run_base.end(), lo)
                     - self.run_base.begin()) - 1
        base = self.run_base[i]
        k = self.run_k0[i] + <int>(lo - base)
        for j in range(lo, end):
            if self.run_at[i] < 0:
                # a placeholder (fill): a wall, no piece
                if not done[j]:
                    hs[j] = 0.0
                    ms[j] = 0.0
                    ks[j] = 0
                    fs[j] = 0
                    ps[j] = -1
                    done[j] = 1
                i += 1
                if i < self.run_k0.size():
                    k = self.run_k0[i]
                continue
            run = &runs.runs[self.run_at[i]]
            if not done[j]:
                s = self.now - run.last_access[k]
                s = s if s > 1.0 else 1.0
                m = run.dsize[k] * self.rate + (self.price * run.dsize[k] * s
                                                if self.price > 0.0 else 0.0)
                hs[j] = run.cprime[k] / s
                ms[j] = m / s
                ks[j] = (_KINDS[run.flags[k] | (run.size[k] <= self.largest) << 3
                                | (m < run.cprime[k]) << 4]
                         | (vs[j] != 0.0) * K_COSTLY)
                fs[j] = run.flags[k]
                ps[j] = run.piece[k]
                done[j] = 1
            k += 1
            if k == self.run_k1[i]:
                i += 1
                if i < self.run_k0.size():
                    k = self.run_k0[i]

    cdef void full(self, size_t total) noexcept:
        """The full pass, where a first-pass bound is not a number (sums overflowed): the
        movers' costs in a lane of their own (so a window without movers gets its bound as
        precisely as the evict-only scan's), each start's bound (-inf where a sum is not a
        number), then plans best-first."""
        cdef double* vs = self.v.data()
        cdef double* qs
        cdef unsigned char* ks = self.kind.data()
        cdef size_t j
        self.details(0, total)
        self.q.resize(total)
        qs = self.q.data()
        for j in range(total):
            if ks[j] & K_MOVER:
                qs[j] = vs[j]
                vs[j] = 0.0
            else:
                qs[j] = 0.0
        self.ub = INFINITY
        self.next_lo = 0
        self.least_lo = total
        scan_windows(total, self.size, vs, qs, self.scan.size.data(), ks, K_KEEP,
                     self.scan.excess_weight, self)
        self.best_first(total)

    cdef void visit(self, size_t lo, double p_left, double p_right, double q_left,
                    double q_right, int taken, int movers, bint costless,
                    size_t covered) noexcept:
        """The smallest window from lo (its movers counted, and taken: its forced movers plus its
        free entries; costless: no entry's v is above 0.0; covered: its bytes): its bound, for
        best_first; NaN (never evaluated) when its forced movers outnumber the free pieces
        outside it, or when its bound is above the cost of a window seen that moves nothing
        (ub). Bounds and ub as the choice compares costs (_per)."""
        cdef double* lbs = self.lbs.data()
        cdef double w = self.scan.excess_weight
        cdef double lb, ub
        while self.next_lo < lo:           # starts without a window
            lbs[self.next_lo] = NAN
            self.next_lo += 1
        self.next_lo = lo + 1
        # below the exact sum of v: a difference of running sums may be off by a few of their
        # ulps (n additions err by at most n * 2^-53 of the sum), and so may a plan's sum
        lb = p_right - p_left - p_right * 1e-10
        if costless:
            # every entry's v is 0.0 (free, or a piece untouched for ever: a demoted one): a
            # plan costs exactly 0.0, and the margins would hide the tie with the other such
            # windows (ties go to the lowest start)
            lb = 0.0
            if not movers:
                self.ub = 0.0
        elif movers:
            lb = lb + (q_right - q_left - q_right * 1e-10)
        else:
            ub = _per(p_right - p_left + p_right * 1e-10, covered, self.size, w)
            if ub < self.ub:
                self.ub = ub        # above this window's plan
        if lb != lb:
            lb = -INFINITY         # costs so large their sums overflow: a bound says nothing
        lb = _per(lb, covered, self.size, w)
        if lb > self.ub or taken > <int>self.bins.size():
            lbs[lo] = NAN
            return
        lbs[lo] = lb
        if self.least_lo == self.lbs.size() or lb < self.least:
            self.least = lb
            self.least_lo = lo

    cdef void best_first(self, size_t total) noexcept:
        """The kept windows' plans, lowest bound first (then lowest start), until the next
        bound is above the best plan's cost: a window not evaluated costs at least its bound,
        so none could beat the best, nor tie it from a later start (ties go to the lowest). The
        window of least bound goes first; then only those whose bound is not above the best
        cost are ordered."""
        cdef double* lbs = self.lbs.data()
        cdef double lb
        cdef size_t lo, i, kept, ordered, popped = 0
        cdef bint eager
        self.best_cost = INFINITY
        self.best_end = 0
        self.best_moved.clear()
        self.heap.clear()
        while self.next_lo < total:
            lbs[self.next_lo] = NAN
            self.next_lo += 1
        if self.least_lo == total:
            return
        self.evaluate(self.least_lo)
        lbs[self.least_lo] = NAN
        for lo in range(total):
            # with no plan yet (the first was infeasible), best_cost is +inf: all are kept
            if lbs[lo] <= self.best_cost:
                self.heap.push_back(pair[double, Py_ssize_t](-lbs[lo], -<Py_ssize_t>lo))
        # windows about as wide as the first, each possibly bounded: where they could read
        # every entry, every entry's details at once (one sweep, no search per window)
        if self.heap.size() * (self.first_end - self.least_lo) >= total:
            self.details(0, total)
        # where recent searches popped most of the windows they ordered (a running share over
        # the searches that tightened bounds as they popped, each weighing 1/8), every kept
        # window's bound is tightened before they are ordered, and those it puts above the
        # best plan's cost are dropped: the heap holds fewer, each popped one needs no bound;
        # else, and every ninth such search (to measure the share again), bounds are
        # tightened as windows are popped
        eager = self.best_end != 0 and self.popped > 0.5 and self.eager_run < 8
        self.eager_run = self.eager_run + 1 if eager else 0
        if eager:
            kept = 0
            for i in range(self.heap.size()):
                lo = <size_t>(-self.heap[i].second)
                lb = self.bound(lo, -self.heap[i].first)
                if lb < self.best_cost or (lb == self.best_cost and lo < self.best_lo):
                    self.heap[kept] = pair[double, Py_ssize_t](-lb, -<Py_ssize_t>lo)
                    kept += 1
            self.heap.resize(kept)
        ordered = self.heap.size()
        self.scan.phases.eager += eager
        self.scan.phases.lazy += not eager
        make_heap(self.heap.begin(), self.heap.end())
        while not self.heap.empty():
            lb = -self.heap.front().first
            lo = <size_t>(-self.heap.front().second)
            # the rest cost at least lb, and those that start later lose a tie
            if self.best_end != 0 and (lb > self.best_cost
                                       or (lb == self.best_cost and lo > self.best_lo)):
                break
            pop_heap(self.heap.begin(), self.heap.end())
            self.heap.pop_back()
            popped += 1
            if self.best_end == 0:
                self.evaluate(lo)
                continue
            if not eager:
                lb = self.bound(lo, lb)
            if lb < self.best_cost or (lb == self.best_cost and lo < self.best_lo):
                self.evaluate(lo)
        if not eager and ordered > 0:
            self.popped = self.popped * 0.875 + 0.125 * popped / ordered

    cdef double bound(self, size_t lo, double lb) noexcept:
        """A tighter bound of the window from lo (lb: its bound), never below lb: its own sum
        of v (not a difference of running sums, whose margin grows with the sums before it),
        plus what its optional movers that cannot move add: a plan moves at most the matroid's
        rank of its movers (the most of them with distinct destinations outside, by size), the
        forced ones among them, so the others are evicted, at h - mv more each: the plan costs at
        least that sum plus the smallest of those differences (+inf: fewer destinations than
        forced movers)."""
        cdef double* hs = self.scan.h.data()
        cdef double* ms = self.scan.mv.data()
        cdef size_t* ss = self.scan.size.data()
        cdef unsigned char* ks = self.kind.data()
        cdef size_t end = lo, covered = 0, extra, i, j
        cdef int forced = 0, free = 0, room, placed = 0
        cdef double more = 0.0, base = 0.0, tight
        cdef unsigned char k
        self.saving.clear()
        self.mover_sizes.clear()
        self.window_details(lo)
        while covered < self.size:
            covered += ss[end]
            k = ks[end]
            base = base + (ms[end] if k & K_MOVER else hs[end])    # v (a free entry's h is 0)
            if k & K_FORCED:
                forced += 1
            elif k & K_MOVER:
                self.saving.push_back(hs[end] - ms[end])
            if k & K_MOVER:
                self.mover_sizes.push_back(ss[end])
            free += (k & K_FREE) != 0
            end += 1
        if <int>self.bins.size() - free - forced < 0:
            return INFINITY
        # the most movers that can have distinct destinations outside (the matroid's rank):
        # largest first against the free pieces outside, largest first
        self.outside(lo, end, self.mover_sizes.size())
        sort(self.mover_sizes.begin(), self.mover_sizes.end())
        i = self.mover_sizes.size()
        j = 0
        while i > 0 and j < self.outb.size():
            if self.mover_sizes[i - 1] <= self.outb[j]:
                placed += 1
                j += 1
            i -= 1               # placed, or no destination left holds it
        room = placed - forced
        if room < 0:
            return INFINITY
        if self.saving.size() > <size_t>room:
            extra = self.saving.size() - <size_t>room
            nth_element(self.saving.begin(), self.saving.begin() + extra, self.saving.end())
            for i in range(extra):       # (a size_t: more than 255 pieces may be evicted)
                more = more + self.saving[i]
        # below the plan's own sum: its rounding and these sums' (a few ulps each) are far below
        # this margin
        tight = _per((base + more) * (1.0 - 1e-10), covered, self.size, self.scan.excess_weight)
        return tight if tight > lb else lb

    cdef void outside(self, size_t lo, size_t end, size_t most) noexcept:
        """outb: the sizes of the free pieces outside entries lo..end-1, largest first (then
        lowest address), at most `most` of them."""
        cdef size_t i = 0
        self.outb.clear()
        while self.outb.size() < most and i < self.bins.size():
            if self.bins[i].second < lo or self.bins[i].second >= end:
                self.outb.push_back(SIZE_MAX - self.bins[i].first)
            i += 1

    cdef void evaluate(self, size_t lo) noexcept:
        """The plan of the smallest window from lo that covers the request; the best so far
        when it is cheaper, or as cheap and starts lower."""
        cdef size_t* ss = self.scan.size.data()
        cdef unsigned char* ks = self.kind.data()
        cdef int n_bins = <int>self.bins.size(), movers = 0, forced = 0, free = 0
        cdef size_t end = lo, covered = 0
        cdef double cost
        self.scan.phases.plans += 1
        self.window_details(lo)
        while covered < self.size:
            covered += ss[end]
            movers += (ks[end] & K_MOVER) != 0
            forced += (ks[end] & K_FORCED) != 0
            free += (ks[end] & K_FREE) != 0
            end += 1
        self.first_end = end            # (best_first reads the first window's)
        if forced > n_bins - free:      # plan needs a destination outside for each
            return
        # as many destinations as there are pieces that may move (a plan never uses more)
        self.outside(lo, end, <size_t>movers)
        if self.plan(lo, end, self.rate, self.outb, self.moved, &cost):
            cost = _per(cost, covered, self.size, self.scan.excess_weight)
            if self.best_end == 0 or cost < self.best_cost or \
                    (cost == self.best_cost and lo < self.best_lo):
                self.best_cost = cost
                self.best_lo = lo
                self.best_end = end
                self.best_moved.swap(self.moved)

    cdef void destinations(self, size_t best_lo, size_t best_end, vector[int]& best_moved,
                           vector[int]& victims, MovePlan* plan) noexcept:
        """The chosen window's moves and victims: its moved entries, largest first (then lowest
        address), each into the smallest unused free piece outside the window that holds it
        (then the lowest address), at its low end. Then the room those destinations leave is
        used (docs/core.md, "Moving": the room a move leaves): the window's candidates still to
        be evicted whose move is cheaper, by saving (h - mv, largest first, then lowest
        address), each move into the smallest room left outside the window that holds it (then
        the lowest address), next to what it already holds. Its other candidates are evicted;
        plan.cost is the plan's cost, summed in address order."""
        cdef Chooser scan = self.scan
        cdef size_t* ss = scan.size.data()
        cdef unsigned char* fs = scan.flags.data()
        cdef int* ps = scan.piece.data()
        cdef Piece* at = scan.pieces.at.data()
        cdef vector[SizeOffset]* order = &self.order
        cdef size_t i, j, need, n = self.bins.size(), size, pick_size = 0
        cdef Py_ssize_t k, pick
        order.clear()
        for i in range(best_moved.size()):
            order.push_back(SizeOffset(SIZE_MAX - ss[best_moved[i]], <size_t>best_moved[i]))
        sort(order.begin(), order.end())
        # bins (largest first, then lowest address) scanned for each moved piece: the smallest
        # untaken one outside the window that holds it, then the lowest address (few pieces
        # move: no sort of the free pieces, no scratch but a flag each)
        self.taken.assign(n, 0)
        self.dst_of.assign(best_end - best_lo, 0)
        cdef vector[size_t] room, cursor
        cdef vector[pair[double, size_t]] extra
        cdef double* hs = scan.h.data()
        cdef double* ms = scan.mv.data()
        cdef double total = 0.0
        cdef Py_ssize_t fit
        # each free piece's room left and its next free byte (SIZE_MAX: its offset, not read
        # yet: its details are written only if a move goes there)
        for k in range(<Py_ssize_t>n):
            j = self.bins[k].second
            room.push_back(0 if best_lo <= j < best_end else SIZE_MAX - self.bins[k].first)
            cursor.push_back(SIZE_MAX)
        for i in range(order.size()):
            need = SIZE_MAX - order[0][i].first
            pick = -1
            for k in range(<Py_ssize_t>n):
                j = self.bins[k].second
                size = SIZE_MAX - self.bins[k].first
                if self.taken[k] or size < need or (best_lo <= j < best_end):
                    continue
                # (later entries are no larger; an equal one is at a higher address)
                if pick < 0 or size < pick_size:
                    pick = k
                    pick_size = size
            if pick >= 0:
                self.taken[pick] = 1
                j = self.bins[pick].second
                self.details(j, j + 1)
                self.dst_of[order[0][i].second - best_lo] = at[ps[j]].offset
                cursor[pick] = at[ps[j]].offset + need
                room[pick] -= need
        self.is_moved.assign(best_end - best_lo, 0)
        for i in range(best_moved.size()):
            self.is_moved[best_moved[i] - best_lo] = 1
        # the room left: candidates to be evicted whose move is cheaper, largest saving first
        # (the window's details are written: its plan read them)
        for j in range(best_lo, best_end):
            if (fs[j] & (W_CANDIDATE | W_MOVABLE | W_FREE)) == (W_CANDIDATE | W_MOVABLE) \
                    and not self.is_moved[j - best_lo] and ms[j] < hs[j]:
                extra.push_back(pair[double, size_t](ms[j] - hs[j], j))
        sort(extra.begin(), extra.end())
        for i in range(extra.size()):
            j = extra[i].second
            need = ss[j]
            fit = -1
            for k in range(<Py_ssize_t>n):
                if room[k] >= need and (fit < 0 or room[k] < room[fit] or (
                        room[k] == room[fit] and self.bins[k].second < self.bins[fit].second)):
                    fit = k
            if fit >= 0:
                if cursor[fit] == SIZE_MAX:
                    self.details(self.bins[fit].second, self.bins[fit].second + 1)
                    cursor[fit] = at[ps[self.bins[fit].second]].offset
                self.dst_of[j - best_lo] = cursor[fit]
                cursor[fit] += need
                room[fit] -= need
                self.is_moved[j - best_lo] = 1
        for j in range(best_lo, best_end):
            if fs[j] & W_FREE:
                continue
            if self.is_moved[j - best_lo]:
                total = total + ms[j]
                plan.moves.push_back(at[ps[j]].storage)
                plan.dst.push_back(self.dst_of[j - best_lo])
            else:
                total = total + hs[j]
                if fs[j] & W_CANDIDATE:
                    victims.push_back(at[ps[j]].storage)
        plan.cost = total

    cdef bint plan(self, size_t lo, size_t end, double rate, vector[size_t]& outb,
                   vector[int]& moved, double* cost) noexcept:
        """The cheapest plan for the window of entries lo..end-1, with outb the sizes of the
        free pieces outside it, largest first: False when its pieces that must move cannot all
        have their own destination. Moved pieces need distinct destinations (one each), so a set
        can move iff its k-th largest piece fits the k-th largest destination; those sets are a
        matroid's independent sets, and adding the optional movers greedily by saving (h - move
        cost, largest first, then lowest address) to the forced ones is optimal. moved: the
        moved entries; cost: the plan's cost, summed in address order."""
        cdef double* hs = self.scan.h.data()
        cdef double* ms = self.scan.mv.data()
        cdef size_t* ss = self.scan.size.data()
        cdef unsigned char* fs = self.scan.flags.data()
        cdef double m, total = 0.0
        cdef vector[size_t]* chosen = &self.chosen    # moved sizes, largest first
        cdef vector[pair[double, size_t]] optional
        cdef unsigned char* is_moved
        cdef size_t t, i
        self.moved_flag.assign(end - lo, 0)
        is_moved = self.moved_flag.data()
        chosen.clear()
        moved.clear()
        for t in range(lo, end):
            if outb.empty():
                break               # nothing can move: every piece is evicted (or free)
            if fs[t] & W_FREE or not (fs[t] & W_MOVABLE):
                continue
            m = ms[t]
            if not (fs[t] & W_CANDIDATE):
                if not _fits_with(chosen[0], ss[t], outb):
                    return False
                _insert_desc(chosen[0], ss[t])
                is_moved[t - lo] = 1
            elif m < hs[t]:
                optional.push_back(pair[double, size_t](m - hs[t], t))
        sort(optional.begin(), optional.end())
        for i in range(optional.size()):
            if chosen.size() >= outb.size():
                break
            t = optional[i].second
            if _fits_with(chosen[0], ss[t], outb):
                _insert_desc(chosen[0], ss[t])
                is_moved[t - lo] = 1
        for t in range(lo, end):
            if fs[t] & W_FREE:
                continue
            if is_moved[t - lo]:
                total = total + ms[t]
                moved.push_back(<int>t)
            else:
                total = total + hs[t]
        cost[0] = total
        return True
