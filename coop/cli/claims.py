"""`coop bench`'s summary of a sweep: per model and policy the minimum feasible ratio and the
points at MARKS, and the claims checked on them (never tuned): coop's minimum <= dtr's and
dte's, within IDEAL_SLACK of dtr-ideal, its overhead within FAMILY_SLACK of the DTR family's
(each exception with its measured cause), never worse than each ablation, less fragmented, and
cheaper to search."""
import math
import statistics

#: ratios reported in the tables (and always swept when above a model's floor)
MARKS = (0.5, 0.3)
#: the search-time claim: dtr's total search time at 0.3 over coop's, at least this
SEARCH_FACTOR = 3.0
#: coop and the DTR family it is compared with
FAMILY = ("coop", "dtr", "dte")


def _at(rows, ratio):
    return next((r for r in rows if abs(r["ratio"] - ratio) < 1e-9), None)


def _point(row):
    if row is None:
        return None
    point = {k: row[k] for k in ("status", "compute_overhead", "search_time",
                                 "fragmentation_rate", "evictions", "bytes_evicted",
                                 "recomputes", "window_moves",
                                 "bytes_moved", "move_cost", "room_made", "cost_total")}
    # the host tier's figures (rows of sweeps from before the tier have none: nothing moved)
    point.update((k, row.get(k, 0)) for k in TIER_FIGURES)
    return point


#: the host tier's figures a point keeps
TIER_FIGURES = ("offloads", "bytes_d2h", "bytes_h2d", "copy_exposed", "host_peak_bytes")


def summarize_policy(rows):
    """A policy's sweep on one source: minimum feasible ratio, failures above it, the MARKS."""
    ok = [r for r in rows if r["status"] == "ok"]
    best = min((r["ratio"] for r in ok), default=None)
    above = [r["ratio"] for r in rows
             if r["status"] != "ok" and (best is None or r["ratio"] > best)]
    return {
        "min_feasible_ratio": best,
        "failures_above_min": above,
        "ratios_run": len(rows),
        "lowest_ratio_run": min(r["ratio"] for r in rows),
        "at": {f"{m:g}": _point(_at(rows, m)) for m in MARKS},
        "at_min": _point(_at(rows, best)) if best is not None else None,
        "max_fragmentation_rate": max((r["fragmentation_rate"] for r in ok), default=None),
        "median_records_per_s": statistics.median(r["records_per_s"] for r in rows),
    }


def _min_claim(mins):
    if any(p not in mins for p in FAMILY):
        return {"holds": None, "why": "needs coop, dtr and dte"}
    c, d, e = mins["coop"], mins["dtr"], mins["dte"]
    if c is None and d is None and e is None:
        return {"holds": None, "why": "no run of coop, dtr or dte completed"}
    inf = math.inf
    holds = (c if c is not None else inf) <= min(d if d is not None else inf,
                                                 e if e is not None else inf)
    return {"holds": holds, "coop": c, "dtr": d, "dte": e}


#: how far above dtr-ideal (no addresses) coop's minimum ratio and overhead at 0.5 may be
IDEAL_SLACK = 0.02


def _ideal_claim(mins, by_policy):
    """coop's minimum ratio <= dtr-ideal's + IDEAL_SLACK, and its overhead at 0.5 <= dtr-ideal's
    + IDEAL_SLACK (where both complete at 0.5): what addresses cost coop."""
    if "coop" not in mins or "dtr-ideal" not in mins:
        return {"holds": None, "why": "needs coop and dtr-ideal"}
    c, i = mins["coop"], mins["dtr-ideal"]
    if i is None:
        return {"holds": None, "why": "no run of dtr-ideal completed"}
    min_holds = c is not None and c <= i + IDEAL_SLACK + 1e-9
    a, b = _at(by_policy["coop"], 0.5), _at(by_policy["dtr-ideal"], 0.5)
    over = None
    if a is not None and b is not None and b["status"] == "ok":
        over = a["status"] == "ok" and \
            a["compute_overhead"] <= b["compute_overhead"] + IDEAL_SLACK + 1e-12
    return {"holds": min_holds and over is not False, "coop": c, "dtr-ideal": i,
            "min_holds": min_holds, "overhead_0.5_holds": over,
            "overhead_0.5": None if a is None or b is None else
            [a["compute_overhead"] if a["status"] == "ok" else None,
             b["compute_overhead"] if b["status"] == "ok" else None]}


def _all_complete(by_policy):
    """(coop, dtr, dte) rows at each ratio of coop's sweep where all three complete."""
    for c in by_policy["coop"]:
        d, e = _at(by_policy["dtr"], c["ratio"]), _at(by_policy["dte"], c["ratio"])
        if all(r is not None and r["status"] == "ok" for r in (c, d, e)):
            yield c, d, e


#: coop's overhead against the DTR family: at most min(dtr, dte) times (1 + FAMILY_SLACK)
FAMILY_SLACK = 0.005


def family_limit(dtr_overhead, dte_overhead):
    """The most overhead the DTR-family claim allows at a ratio where dtr and dte complete:
    min(dtr, dte) * (1 + FAMILY_SLACK), and 1e-12 relative for the sums' rounding."""
    return min(dtr_overhead, dte_overhead) * (1 + FAMILY_SLACK) * (1 + 1e-12)


#: an exception's cause, measured by the evict-only ablation (coop-no-move) at its ratio
FAMILY_CAUSES = {
    "window": "the evict-only window above it too",
    "moves": "moves add it (the evict-only window within)",
    "window_fails": "the evict-only window fails there",
    "unmeasured": "no coop-no-move run",
}


def _family_claim(by_policy):
    """coop's compute overhead at most min(dtr, dte) * (1 + FAMILY_SLACK) at every ratio where
    coop, dtr and dte all complete, and each exception's cause, measured by the evict-only
    ablation at that ratio (FAMILY_CAUSES): coop-no-move above the bound too (the window's
    choice is dearer already, before any move), within it (coop's moves add the overhead), or
    failing there."""
    if any(p not in by_policy for p in FAMILY):
        return {"holds": None, "why": "needs coop, dtr and dte"}
    ratios, exceptions = 0, []
    for c, d, e in _all_complete(by_policy):
        ratios += 1
        best, who = min((d["compute_overhead"], "dtr"), (e["compute_overhead"], "dte"))
        limit = family_limit(d["compute_overhead"], e["compute_overhead"])
        if c["compute_overhead"] <= limit:
            continue
        n = _at(by_policy.get("coop-no-move", []), c["ratio"])
        if n is None:
            cause, plain = "unmeasured", None
        elif n["status"] != "ok":
            cause, plain = "window_fails", n["status"]
        else:
            plain = n["compute_overhead"]
            cause = "window" if plain > limit else "moves"
        exceptions.append({"ratio": c["ratio"], "coop": c["compute_overhead"], "best": best,
                           "by": who, "coop-no-move": plain, "cause": cause})
    if not ratios:
        return {"holds": None, "why": "no ratio where coop, dtr and dte all complete"}
    causes = {k: n for k in FAMILY_CAUSES if (n := sum(x["cause"] == k for x in exceptions))}
    return {"holds": not exceptions, "ratios": ratios, "exceptions": exceptions,
            "causes": causes,
            "largest_excess": max((x["coop"] / x["best"] - 1 for x in exceptions), default=0.0)}


def _never_worse_claim(by_policy, other, mine="coop", strict=False):
    """`mine` (coop) no worse than the ablation `other`: its minimum ratio no higher, and its
    compute overhead no higher (1e-9 relative) at every ratio where both complete; strict: and
    completing at every ratio where `other` completes (fails_at lists those it does not)."""
    if mine not in by_policy or other not in by_policy:
        return {"holds": None, "why": f"needs {mine} and {other}"}
    ok_c = [r["ratio"] for r in by_policy[mine] if r["status"] == "ok"]
    ok_o = [r["ratio"] for r in by_policy[other] if r["status"] == "ok"]
    c, o = min(ok_c, default=None), min(ok_o, default=None)
    min_holds = o is None or (c is not None and c <= o + 1e-9)
    worse = []
    for r in by_policy[mine]:
        q = _at(by_policy[other], r["ratio"])
        if r["status"] == "ok" and q is not None and q["status"] == "ok" and \
                r["compute_overhead"] > q["compute_overhead"] * (1 + 1e-9):
            worse.append(r["ratio"])
    fails = [r["ratio"] for r in by_policy[mine] if r["status"] != "ok"
             and (q := _at(by_policy[other], r["ratio"])) is not None and q["status"] == "ok"]
    out = {"holds": min_holds and not worse, mine: c, other: o, "min_holds": min_holds,
           "worse_at": worse}
    if strict:
        out["fails_at"] = fails
        out["holds"] = out["holds"] and not fails
    return out


#: the host tier's target: its minimum ratio within this of the offload floor
FLOOR_SLACK = 0.05


def _tier_claim(source, mins, policy="coop-offload"):
    """The host tier breaks the recompute-only floor: the offloading policy's minimum ratio
    below the lower bound and within FLOOR_SLACK of the offload floor."""
    if policy not in mins:
        return {"holds": None, "why": f"needs {policy}"}
    m = mins[policy]
    if m is None:
        return {"holds": False, policy: None}
    below = m < source["lower_bound_ratio"] - 1e-9
    near = m <= source["offload_floor_ratio"] + FLOOR_SLACK + 1e-9
    return {"holds": below and near, policy: m, "below_lower_bound": below,
            "within_floor_slack": near, "lower_bound": source["lower_bound_ratio"],
            "offload_floor": source["offload_floor_ratio"]}


def _fragmentation_claim(by_policy):
    """coop's fragmentation rate below dtr's and dte's at every ratio where all three complete
    and each searched at least once (the rate is a mean over searches: none, no rate)."""
    if any(p not in by_policy for p in FAMILY):
        return {"holds": None, "why": "needs coop, dtr and dte"}
    points, no_search = [], []
    for c, d, e in _all_complete(by_policy):
        if not (c["searches"] and d["searches"] and e["searches"]):
            no_search.append(c["ratio"])
            continue
        points.append((c["ratio"], c["fragmentation_rate"], d["fragmentation_rate"],
                       e["fragmentation_rate"]))
    if not points:
        return {"holds": None, "why": "no ratio where coop, dtr and dte all complete and search",
                "ratios_without_searches": no_search}
    return {
        "holds": all(c < d and c < e for _, c, d, e in points),
        "ratios": len(points),
        "ratios_without_searches": no_search,
        "violations": [r for r, c, d, e in points if not (c < d and c < e)],
        "mean": {p: statistics.fmean(pt[i] for pt in points)
                 for i, p in enumerate(FAMILY, 1)},
    }


def _search_claim(by_policy, ratio=0.3):
    if "coop" not in by_policy or "dtr" not in by_policy:
        return {"holds": None, "why": "needs coop and dtr"}
    c, d = _at(by_policy["coop"], ratio), _at(by_policy["dtr"], ratio)
    failed = [f"{p} {'not run (its sweep had stopped)' if r is None else r['status']}"
              for p, r in (("coop", c), ("dtr", d)) if r is None or r["status"] != "ok"]
    if failed:
        return {"holds": None, "why": f"at {ratio:g}: " + ", ".join(failed)}
    tc, td = c["search_time"], d["search_time"]
    if tc == 0 and td == 0:
        return {"holds": None, "why": f"neither searched at {ratio:g}", "coop": 0.0, "dtr": 0.0}
    factor = td / tc if tc else math.inf
    return {"holds": factor >= SEARCH_FACTOR, "coop": tc, "dtr": td, "factor": factor,
            "coop_searches": c["searches"], "dtr_searches": d["searches"]}


def search_factor_median(by_policy):
    """dtr's total search time over coop's, median over the ratios where both complete and
    coop searched (None if there are none): search time beyond the single ratio 0.3."""
    if "coop" not in by_policy or "dtr" not in by_policy:
        return None
    factors = []
    for c in by_policy["coop"]:
        d = _at(by_policy["dtr"], c["ratio"])
        if c["status"] == "ok" and d is not None and d["status"] == "ok" and c["search_time"]:
            factors.append(d["search_time"] / c["search_time"])
    return {"median": statistics.median(factors), "ratios": len(factors)} if factors else None


def summarize(sources, rows, policies):
    """summary.json's content: per source, its unlimited run, per policy summaries and the
    paper's claims (holds: true, false, or null where it cannot be checked, with why)."""
    summary = {}
    for s in sources:
        mine = [r for r in rows if r["model"] == s["name"]]
        by_policy = {p: [r for r in mine if r["policy"] == p] for p in policies}
        by_policy = {p: v for p, v in by_policy.items() if v}
        per = {p: summarize_policy(v) for p, v in by_policy.items()}
        mins = {p: v["min_feasible_ratio"] for p, v in per.items()}
        summary[s["name"]] = {
            **{k: v for k, v in s.items() if k != "name"},
            "policies": per,
            "search_dtr_over_coop": search_factor_median(by_policy),
            "claims": {
                "min_budget": _min_claim(mins),
                "ideal": _ideal_claim(mins, by_policy),
                "overhead_vs_dtr_family": _family_claim(by_policy),
                **{f"not_worse_than_{p}": _never_worse_claim(by_policy, p)
                   for p in ("coop-no-move", "coop-no-inplace", "coop-no-partition")},
                "fragmentation": _fragmentation_claim(by_policy),
                "search_time_0.3": _search_claim(by_policy),
                "offload_not_worse_than_coop": _never_worse_claim(by_policy, "coop",
                                                                  "coop-offload", strict=True),
                "offload_floor": _tier_claim(s, mins),
            },
        }
    return summary
