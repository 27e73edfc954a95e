"""`coop bench`'s report: Markdown tables (for the README) and matplotlib figures, from the
sweep's rows and summary (coop/cli/bench.py)."""
import math
import os
import statistics

from coop.cli.claims import FAMILY_CAUSES, FAMILY_SLACK, IDEAL_SLACK
from coop.trace import replay as R

GIB = 1 << 30


def _ratio(x):
    return "none" if x is None else f"{x:.2f}"


def _cell(point):
    """A replay at a marked ratio: its overhead, OOM, thrash, or - when the sweep stopped first."""
    if point is None:
        return "-"
    if point["status"] == "ok":
        return f"{point['compute_overhead']:.3f}"
    return "OOM" if point["status"] == "oom" else point["status"]


def _table(header, rows, text=False):
    """A Markdown table; numbers right-aligned unless text."""
    align = "---" if text else "---:"
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join(["---"] + [align] * (len(header) - 1)) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _claim(c, show):
    if c["holds"] is None:
        return f"n/a ({c['why']})"
    return ("holds" if c["holds"] else "does not hold") + f" ({show(c)})"


def _min_text(c):
    return f"coop {_ratio(c['coop'])}, dtr {_ratio(c['dtr'])}, dte {_ratio(c['dte'])}"


def _frag_text(c):
    m = c["mean"]
    text = (f"{c['ratios']} ratios; mean coop {m['coop']:.3f}, dtr {m['dtr']:.3f}, "
            f"dte {m['dte']:.3f}")
    if c["violations"]:
        v = c["violations"]
        text += f"; not below at {len(v)}: {', '.join(f'{r:.2f}' for r in v[:4])}"
        text += ", ..." if len(v) > 4 else ""
    return text


def _family_text(c):
    text = f"{len(c['exceptions'])} of {c['ratios']} ratios above"
    if c["exceptions"]:
        text += (f", by up to {100 * c['largest_excess']:.1f}%; "
                 + ", ".join(f"{n} {FAMILY_CAUSES[k]}" for k, n in c["causes"].items()))
    return text


def _search_text(c):
    factor = "inf" if math.isinf(c["factor"]) else f"{c['factor']:.1f}x"
    return f"coop {c['coop'] * 1e3:.2f} ms, dtr {c['dtr'] * 1e3:.2f} ms: {factor}"


def tables(summary, policies, rows):
    """The Markdown report: minimum feasible ratios, overheads at 0.5 and 0.3, coop against
    the others, the claims per model, and the replay speed."""
    out = []
    body = []
    for name, s in summary.items():
        cells = []
        for p in policies:
            v = s["policies"].get(p)
            cells.append("-" if v is None else
                         _ratio(v["min_feasible_ratio"]) + ("*" if v["failures_above_min"] else ""))
        batch = s["batch"] if s["batch"] is not None else "trace"
        body.append([name, batch, f"{s['peak_bytes'] / GIB:.2f}",
                     f"{s['lower_bound_ratio']:.2f}", f"{s['offload_floor_ratio']:.2f}", *cells])
    out.append("Minimum feasible budget ratio (smallest ratio that completes; *: some larger "
               "ratio failed, runs are not monotone in the budget), beside the lower bound (the "
               "largest op's inputs and outputs with every constant) and the offload floor (the "
               "same without the constants the op does not read, which a host tier could hold):\n")
    out.append(_table(["model", "batch", "peak GiB", "lower bound", "offload floor",
                       *policies], body))
    for mark in ("0.5", "0.3"):
        body = [[name, *(_cell(s["policies"][p]["at"][mark]) if p in s["policies"] else "-"
                         for p in policies)] for name, s in summary.items()]
        out.append(f"\nCompute overhead at ratio {mark} (OOM / thrash: overhead > {R.THRASH:g}; "
                   "-: not run, the sweep had stopped):\n")
        out.append(_table(["model", *policies], body))

    body = []
    for name, s in summary.items():
        mins = {p: v["min_feasible_ratio"] for p, v in s["policies"].items()}
        c = mins.get("coop")
        saving = {p: "-" if c is None or mins.get(p) is None else f"{mins[p] / c:.2f}"
                  for p in ("dtr", "dte")}
        ideal = mins.get("dtr-ideal")
        cost = "-" if c is None or ideal is None else f"{c - ideal:+.2f}"
        fr = s["claims"]["fragmentation"]
        if fr["holds"] is None:
            frag, below = "-", "n/a"
        else:
            m = fr["mean"]
            frag = f"{m['coop']:.3f} / {m['dtr']:.3f} / {m['dte']:.3f} ({fr['ratios']})"
            below = "yes" if fr["holds"] else f"no ({len(fr['violations'])})"
        se = s["claims"]["search_time_0.3"]
        if se["holds"] is None:
            search = ["-", "-", "-"]
        else:
            factor = "inf" if math.isinf(se["factor"]) else f"{se['factor']:.1f}"
            search = [f"{se['coop'] * 1e3:.2f}", f"{se['dtr'] * 1e3:.2f}", factor]
        every = s["search_dtr_over_coop"]
        search.append("-" if every is None else f"{every['median']:.2f} ({every['ratios']})")
        body.append([name, _ratio(c), _ratio(mins.get("dtr")), _ratio(mins.get("dte")),
                     saving["dtr"], saving["dte"], _ratio(ideal), cost, frag, below, *search])
    out.append("\ncoop against the others: minimum feasible ratios (dtr/coop: the memory saving); "
               "coop - dtr-ideal (what addresses cost); mean fragmentation rate coop / dtr / dte "
               "over the ratios where all three complete and search (count), and whether coop's "
               "is below both at every one (else the count of ratios where it is not); total "
               "search time at 0.3 where both complete, and dtr's over coop's at every ratio where "
               "both complete (median, count):\n")
    out.append(_table(["model", "coop min", "dtr min", "dte min", "dtr/coop", "dte/coop",
                       "dtr-ideal min", "coop - ideal", "frag coop / dtr / dte",
                       "coop below both", "search @0.3 coop ms", "dtr ms", "dtr/coop",
                       "search dtr/coop, all ratios"], body))

    body = []
    for name, s in summary.items():
        cl = s["claims"]
        body.append([name, _claim(cl["min_budget"], _min_text),
                     _claim(cl["overhead_vs_dtr_family"], _family_text),
                     _claim(cl["fragmentation"], _frag_text),
                     _claim(cl["search_time_0.3"], _search_text)])
    out.append("\nThe claims, per model (checked, not tuned):\n")
    out.append(_table(["model", "coop min <= dtr's and dte's",
                       (f"overhead <= min(dtr, dte) + {100 * FAMILY_SLACK:g}% at every ratio "
                        "where all three complete (each exception's cause: coop-no-move at "
                        "its ratio)"),
                       ("coop's fragmentation below dtr's and dte's at every ratio where all "
                        "three complete"), "search time at 0.3: dtr >= 3x coop"], body, text=True))

    out.extend(_ablation_tables(summary, policies))
    out.extend(_tier_tables(summary, policies))

    body = []
    for p in policies:
        speeds = [r["records_per_s"] for r in rows if r["policy"] == p]
        if speeds:
            body.append([p, f"{statistics.median(speeds):,.0f}", len(speeds)])
    out.append("\nReplay speed (records per second, median over the policy's replays):\n")
    out.append(_table(["policy", "records/s", "replays"], body))
    return "\n".join(out) + "\n"


def _tier_cell(point):
    """The host tier at one run: offloads / GiB copied out / GiB back / the exposed copy
    time's share of the cost executed / the tier's peak GiB."""
    if point is None or point["status"] != "ok":
        return "-" if point is None else point["status"]
    share = point["copy_exposed"] / point["cost_total"] if point["cost_total"] else 0.0
    return (f"{point['offloads']:,} / {point['bytes_d2h'] / GIB:.2f} / "
            f"{point['bytes_h2d'] / GIB:.2f} / {100 * share:.1f}% / "
            f"{point['host_peak_bytes'] / GIB:.2f}")


def _tier_tables(summary, policies):
    """The host tier (coop-offload) against coop: minimum ratios beside the lower bound and the
    offload floor, the overheads at the MARKS, and what the tier did at its minimum."""
    if "coop-offload" not in policies or "coop" not in policies:
        return []
    body = []
    for name, s in summary.items():
        c, t = s["policies"].get("coop"), s["policies"].get("coop-offload")
        if c is None or t is None:
            continue
        cl = s["claims"]
        floor, worse = cl["offload_floor"], cl["offload_not_worse_than_coop"]
        body.append([name, f"{s['lower_bound_ratio']:.2f}", f"{s['offload_floor_ratio']:.2f}",
                     _ratio(c["min_feasible_ratio"]), _ratio(t["min_feasible_ratio"]),
                     "yes" if floor["holds"] else "no",
                     "yes" if worse["holds"] else
                     f"no ({', '.join(f'{r:g}' for r in worse['worse_at'] + worse['fails_at']) or 'min'})",
                     *(f"{_cell(c['at'][m])} / {_cell(t['at'][m])}" for m in ("0.5", "0.3")),
                     _tier_cell(t["at_min"])])
    return ["\nThe host tier: coop-offload (offloads to host memory when no window exists "
            "without them) against coop: minimum feasible ratios beside the lower bound and "
            "the offload floor; whether its minimum is below the bound and within 0.05 of the "
            "floor; whether it is never worse than coop (minimum, and overhead at every ratio "
            "both complete); overhead coop / coop-offload at 0.5 and 0.3; and at its minimum: "
            "offloads / GiB to the host / GiB back / exposed copy time's share of the cost / "
            "host tier peak GiB:\n",
            _table(["model", "lower bound", "offload floor", "coop min", "coop-offload min",
                    "below bound, near floor", "never worse than coop", "@0.5", "@0.3",
                    "tier @its min"], body)]


#: the table of coop against its ablations and the DTR baselines
ABLATION = ("coop", "coop-no-move", "coop-no-inplace", "coop-no-partition", "dtr", "dte",
            "dtr-ideal")


def _moves_cell(point):
    """coop's moves at one run: moves / MiB moved / move cost's share of the cost executed,
    and how often it made room for a kernel by moving its inputs."""
    if point is None:
        return "-"
    share = point["move_cost"] / point["cost_total"] if point["cost_total"] else 0.0
    return (f"{point['window_moves']:,} / {point['bytes_moved'] / 2**20:,.1f} / "
            f"{100 * share:.3f}% / {point['room_made']:,}")


def _verdict(claim, text):
    if claim is None or claim["holds"] is None:
        return "n/a" + (f" ({claim['why']})" if claim else "")
    return ("holds" if claim["holds"] else "does not hold") + f" ({text(claim)})"


def _ablation_tables(summary, policies):
    """coop against its ablations and the baselines: the minimum ratios beside the lower
    bound, coop's moves, and the claims that coop is never worse than each ablation and within
    IDEAL_SLACK of dtr-ideal."""
    shown = [p for p in ABLATION if p in policies]
    if "coop" not in shown:
        return []
    out = []
    body = []
    for name, s in summary.items():
        pol = s["policies"]
        cells = []
        for p in shown:
            v = pol.get(p)
            cells.append("-" if v is None else
                         _ratio(v["min_feasible_ratio"]) + ("*" if v["failures_above_min"] else ""))
        c = pol.get("coop")
        at = c["at"] if c else {}
        body.append([name, f"{s['lower_bound_ratio']:.2f}", *cells,
                     _moves_cell(at.get("0.5")), _moves_cell(at.get("0.3")),
                     _moves_cell(c["at_min"] if c else None)])
    out.append("\ncoop, its ablations and the DTR baselines: minimum feasible ratio beside the "
               "lower bound (the largest memory any one op needs: its pinned inputs, outputs and "
               "the constants), and coop's moves at 0.5, at 0.3 and at its minimum ratio "
               "(moves / MiB moved / the move cost's share of the cost executed / times it made "
               "room for a kernel by moving the kernel's inputs):\n")
    out.append(_table(["model", "lower bound", *shown, "coop moves @0.5", "@0.3",
                       "@its min"], body))
    body = []
    for name, s in summary.items():
        cl = s["claims"]
        row = [name, _verdict(cl.get("ideal"), _ideal_text)]
        for p in ("coop-no-move", "coop-no-inplace", "coop-no-partition"):
            row.append(_verdict(cl.get(f"not_worse_than_{p}"), _worse_text(p)))
        c, i = (s["policies"].get(p, {}).get("at", {}).get("0.5") for p in ("coop", "dtr-ideal"))
        if c and i and c["status"] == i["status"] == "ok" and i["bytes_evicted"]:
            row.append(f"{c['bytes_evicted'] / i['bytes_evicted']:.2f} / "
                       f"{c['recomputes'] / max(i['recomputes'], 1):.2f}")
        else:
            row.append("-")
        body.append(row)
    out.append(f"\ncoop against dtr-ideal (minimum ratio and overhead at 0.5 each within "
               f"{IDEAL_SLACK:g}) and against each ablation (minimum ratio no higher, overhead no "
               "higher at every ratio where both complete); and at 0.5, the bytes coop evicted "
               "and the recomputes it made over dtr-ideal's (what contiguity costs: a window "
               "frees whole neighbors):\n")
    out.append(_table(["model", f"coop <= dtr-ideal + {IDEAL_SLACK:g}", "coop <= coop-no-move",
                       "coop <= coop-no-inplace", "coop <= coop-no-partition",
                       "@0.5 bytes evicted / recomputes, coop over dtr-ideal"], body,
                      text=True))
    return out


def _ideal_text(c):
    o = c.get("overhead_0.5")
    over = "" if o is None else (
        "; @0.5 " + " / ".join("fails" if x is None else f"{x:.3f}" for x in o))
    return f"min {_ratio(c['coop'])} vs {_ratio(c['dtr-ideal'])}{over}"


def _worse_text(other):
    def text(c):
        worse = c["worse_at"]
        more = "" if not worse else (f"; dearer at {len(worse)}: "
                                     + ", ".join(f"{r:.2f}" for r in worse[:4])
                                     + (", ..." if len(worse) > 4 else ""))
        return f"min {_ratio(c['coop'])} vs {_ratio(c[other])}{more}"
    return text


# ---- figures -------------------------------------------------------------------------------------

def _grid(plt, n):
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _lines(plt, summary, rows, policies, path, key, ylabel, title, log=False, clip=None):
    """One subplot per model: `key` of the runs that complete against the ratio, per policy."""
    colors = plt.get_cmap("tab10")
    fig, axes = _grid(plt, len(summary))
    for ax, name in zip(axes, summary):
        for i, p in enumerate(policies):
            pts = [(r["ratio"], r[key]) for r in rows
                   if r["model"] == name and r["policy"] == p and r["status"] == "ok"
                   and (r[key] > 0 or not log)]
            if clip is not None:
                pts = [(x, min(y, clip)) for x, y in pts]
            if pts:
                top = p == "coop"    # drawn over the ablations that often coincide with it
                ax.plot(*zip(*sorted(pts)), marker=".", ms=3, lw=1.6 if top else 1,
                        color=colors(i % 10), label=p, zorder=4 if top else 2)
        if clip is not None:
            ax.axhline(clip, color="gray", ls="--", lw=1, label=f"thrash ({clip:g})")
            ax.set_ylim(top=clip * 1.03)
        ax.axvline(summary[name]["lower_bound_ratio"], color="black", ls=":", lw=1,
                   label="lower bound")
        if log:
            ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.set_xlim(1.02, 0)
        ax.set_xlabel("budget ratio")
        ax.set_ylabel(ylabel)
        ax.tick_params(labelsize=8)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bars(plt, summary, policies, path):
    colors = plt.get_cmap("tab10")
    names = list(summary)
    width = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(names)), 4))
    for i, p in enumerate(policies):
        xs, ys = [], []
        for j, name in enumerate(names):
            v = summary[name]["policies"].get(p)
            if v is not None and v["min_feasible_ratio"] is not None:
                xs.append(j - 0.4 + (i + 0.5) * width)
                ys.append(v["min_feasible_ratio"])
        ax.bar(xs, ys, width, color=colors(i % 10), label=p)
    for j, name in enumerate(names):
        ax.hlines(summary[name]["lower_bound_ratio"], j - 0.45, j + 0.45, color="black", lw=1.5,
                  label="lower bound" if j == 0 else None)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("minimum feasible budget ratio")
    ax.set_ylim(0, 1.2)
    ax.set_title("Minimum feasible budget per model (lower is better; no bar: none completed)")
    ax.legend(fontsize=7, ncol=5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_all(summary, rows, policies, out):
    """overhead.png, fragmentation.png, search_time.png and min_budget.png in out."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _lines(plt, summary, rows, policies, os.path.join(out, "overhead.png"),
           "compute_overhead", "compute overhead",
           "Compute overhead vs budget ratio (runs that complete)", clip=R.THRASH)
    _lines(plt, summary, rows, policies, os.path.join(out, "fragmentation.png"),
           "fragmentation_rate", "fragmentation rate",
           "Fragmentation rate (mean free / budget at eviction searches) vs budget ratio")
    _lines(plt, summary, rows, policies, os.path.join(out, "search_time.png"),
           "search_time", "search time (s)",
           "Total eviction search time vs budget ratio (runs that complete)", log=True)
    _bars(plt, summary, policies, os.path.join(out, "min_budget.png"))
