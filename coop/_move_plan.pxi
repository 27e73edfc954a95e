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


@cython.final
cdef class MovePlanner:
    """Chooses the window whose pieces leave by eviction or by moving, whichever is cheaper."""

    def __cinit__(self, Chooser scan):
        self.scan = scan

    cdef void choose(self, size_t size, double now, double rate, vector[int]& victims,
                     MovePlan* plan) noexcept:
        """Each piece of a window leaves it by the cheaper of eviction (h) and moving (its bytes
        times rate); a movable piece that is not a candidate must move, a piece that is neither
        is a wall. v = that cheaper cost is a lower bound of the piece's share, so the
        two-pointer scan over v finds, from each start, the smallest window that covers the
        request; a window's exact plan (plan) only grows dearer and less feasible as the window
        grows, so that window is the best from its start. Plans are evaluated only where the
        lower bound can beat the best so far."""
        cdef Chooser scan = self.scan
        cdef size_t total = scan.fill(now, True)
        self.v.resize(total)
        self.mover.resize(total)
        self.bins.clear()
        cdef double* hs = scan.h.data()
        cdef double* vs = self.v.data()
        cdef unsigned char* lane = self.mover.data()
        cdef size_t* ss = scan.size.data()
        cdef unsigned char* fs = scan.flags.data()
        cdef size_t j
        cdef double m
        cdef unsigned char f
        self.nfree.resize(total + 1)
        self.nmand.resize(total + 1)
        self.nopt.resize(total + 1)
        cdef int* nfree = self.nfree.data()
        cdef int* nmand = self.nmand.data()
        cdef int* nopt = self.nopt.data()
        nfree[0] = nmand[0] = nopt[0] = 0
        for j in range(total):
            f = fs[j]
            nfree[j + 1] = nfree[j]
            nmand[j + 1] = nmand[j]
            nopt[j + 1] = nopt[j]
            lane[j] = 0
            if f & W_FREE:
                vs[j] = 0.0
                self.bins.push_back(SizeOffset(SIZE_MAX - ss[j], j))
                nfree[j + 1] += 1
            elif f & W_MOVABLE:
                m = <double>ss[j] * rate
                if not (f & W_CANDIDATE):
                    vs[j] = m
                    nmand[j + 1] += 1
                    lane[j] = 1
                elif m < hs[j]:
                    vs[j] = m
                    nopt[j + 1] += 1
                    lane[j] = 1
                else:
                    vs[j] = hs[j]
            else:
                vs[j] = hs[j]
        # an upper bound: the cheapest window that only evicts, so that windows that cannot
        # beat it are skipped before the best so far is known
        cdef size_t ev_lo, ev_end
        cdef double ev_cost, ev_sum
        cdef double ub = INFINITY
        if scan.evict_window(size, total, &ev_lo, &ev_end, &ev_cost, &ev_sum):
            ub = ev_cost + ev_sum * 1e-10           # above the exact sum (see lb below)
        if ub != ub:
            ub = INFINITY
        sort(self.bins.begin(), self.bins.end())   # largest first, then lowest address
        self.ub = ub
        self.rate = rate
        self.best_cost = INFINITY
        self.best_end = 0
        self.best_moved.clear()
        # the movers' running sums (move costs, often far larger) are apart from the others',
        # so a window without movers gets its bound as precisely as the evict-only scan's
        scan_windows(total, size, vs, ss, fs, W_FREE | W_CANDIDATE | W_MOVABLE, lane, self)
        if self.best_end == 0:
            return
        plan.cost = self.best_cost
        plan.start = <Py_ssize_t>scan.pieces.at[scan.piece[self.best_lo]].offset
        plan.pieces = <Py_ssize_t>(self.best_end - self.best_lo)
        self.destinations(self.best_lo, self.best_end, self.best_moved, victims, plan)

    cdef void visit(self, size_t lo, size_t j, double p_left, double p_right, double q_left,
                    double q_right) noexcept:
        """The window of entries lo..j: its exact plan when its lower bound (the running sums
        of v) can beat both the best plan so far and the evict-only bound."""
        cdef int* nfree = self.nfree.data()
        cdef int* nmand = self.nmand.data()
        cdef int* nopt = self.nopt.data()
        cdef int n_bins = <int>self.bins.size(), n_mand, n_out, n_movers
        cdef double lb, cost
        cdef size_t i
        # below the exact sum of v: a difference of running sums may be off by a few of their
        # ulps (n additions err by at most n * 2^-53 of the sum)
        lb = p_right - p_left - p_right * 1e-10
        if nmand[j + 1] + nopt[j + 1] != nmand[lo] + nopt[lo]:
            lb = lb + (q_right - q_left - q_right * 1e-10)
        n_mand = nmand[j + 1] - nmand[lo]
        n_out = n_bins - (nfree[j + 1] - nfree[lo])
        # quick refusals and the plan without movers need no destinations
        if (self.best_end == 0 or not (lb >= self.best_cost)) and n_mand <= n_out \
                and not (lb > self.ub):
            # the largest destinations outside, as many as there are pieces that may move (a
            # plan never uses more)
            self.outb.clear()
            n_movers = n_mand + nopt[j + 1] - nopt[lo]
            i = 0
            while <int>self.outb.size() < n_movers and i < <size_t>n_bins:
                if self.bins[i].second < lo or self.bins[i].second > j:
                    self.outb.push_back(SIZE_MAX - self.bins[i].first)
                i += 1
            if self.plan(lo, j + 1, self.rate, self.outb, self.moved, &cost):
                if cost < self.best_cost or self.best_end == 0:
                    self.best_cost = cost
                    self.best_lo = lo
                    self.best_end = j + 1
                    self.best_moved.swap(self.moved)

    cdef void destinations(self, size_t best_lo, size_t best_end, vector[int]& best_moved,
                           vector[int]& victims, MovePlan* plan) noexcept:
        """The chosen window's moves and victims: its moved entries, largest first (then lowest
        address), each into the smallest unused free piece outside the window that holds it
        (then the lowest address); its other candidates are evicted."""
        cdef Chooser scan = self.scan
        cdef size_t* ss = scan.size.data()
        cdef unsigned char* fs = scan.flags.data()
        cdef int* ps = scan.piece.data()
        cdef Piece* at = scan.pieces.at.data()
        cdef vector[SizeOffset] order, bins
        cdef size_t i, j, need
        cdef int k
        for i in range(best_moved.size()):
            order.push_back(SizeOffset(SIZE_MAX - ss[best_moved[i]], <size_t>best_moved[i]))
        sort(order.begin(), order.end())
        for i in range(self.bins.size()):
            j = self.bins[i].second
            if j < best_lo or j >= best_end:
                bins.push_back(SizeOffset(SIZE_MAX - self.bins[i].first, j))
        sort(bins.begin(), bins.end())
        cdef vector[size_t] dst_of
        cdef vector[unsigned char] taken, is_moved
        dst_of.assign(best_end - best_lo, 0)
        taken.assign(bins.size(), 0)
        for i in range(order.size()):
            need = SIZE_MAX - order[i].first
            for k in range(<int>bins.size()):
                if not taken[k] and bins[k].first >= need:
                    taken[k] = 1
                    dst_of[order[i].second - best_lo] = at[ps[bins[k].second]].offset
                    break
        is_moved.assign(best_end - best_lo, 0)
        for i in range(best_moved.size()):
            is_moved[best_moved[i] - best_lo] = 1
        for j in range(best_lo, best_end):
            if is_moved[j - best_lo]:
                plan.moves.push_back(at[ps[j]].storage)
                plan.dst.push_back(dst_of[j - best_lo])
            elif fs[j] & W_CANDIDATE:
                victims.push_back(at[ps[j]].storage)

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
            m = <double>ss[t] * rate
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
                total = total + <double>ss[t] * rate
                moved.push_back(<int>t)
            else:
                total = total + hs[t]
        cost[0] = total
        return True
