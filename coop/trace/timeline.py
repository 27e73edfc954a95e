"""A memory timeline to browse: one self-contained HTML file (inline SVG, script and styles; no
network) drawing every piece of the arena over a replay of a trace: address on one axis, the
trace's records on the other, each piece coloured by kind, its eviction, recompute or move
marked, the tensor's op, size, cost and lifetime on hover, zoom and pan.

The pieces come from the arena's allocation log (``Arena.start_log`` / ``take_log``), taken
record by record while the replayer runs; after each record the engine says whose each new
piece is (a constant, or a computed storage of its producer's class) and why each freed piece
went (evicted, released, moved). The log has each move of coop's window (policies that move)
where it happened, so a moved piece is drawn at its old range up to the move and at its new
one after. ``write(trace, path, budget=...)`` draws a trace;
``Runtime.timeline(path)`` draws a stretch of a live run (docs/trace-format.md#timelines).

The page's script (coop/trace/timeline.js) is plain JS over SVG, written here: the one plotting
library on PyPI that writes offline pages, plotly (``include_plotlyjs=True``), inlines a
bundle of several megabytes into every page and draws rectangles as layout shapes without per-piece
attributes, which the browser test reads.
"""
import contextlib
import html
import json
import os
import tempfile
from importlib import resources

from coop._core import EXPENSIVE, LOG_MOVE, log_records
from coop.errors import OutOfMemoryError, Thrash

__all__ = ["FROM_TRACE", "KINDS", "MARKS", "Timeline", "collect", "recording", "render", "write"]

#: piece kinds, in the data's order: a constant (no producer, never evicted), a computed
#: storage placed as EXPENSIVE or CHEAP, and a transient piece allocated and freed within one
#: record (a kernel's temporary, or a value recomputed and evicted again before the record ended)
KINDS = ("constant", "expensive", "cheap", "transient")
#: how a piece begins or ends: "" (a first run or a constant; alive at the end), placed again
#: by a recompute, evicted, released by the program, moved (copied to another range), offloaded
#: to the host tier, fetched (copied back from it)
MARKS = ("", "recomputed", "evicted", "released", "moved", "offloaded", "fetched")


class Timeline:
    """What a timeline draws: ``pieces`` as dicts (offset, size, nbytes, t0, t1, kind, begin,
    end, op, cost, source: the offset a moved piece came from, to: the offset it moved to; -1
    when it did not move); ``marks``, [record, recomputes, evictions, moves, offloads,
    copies back] of each record that made any (the engine's and the arena's counters, so they
    add up to the figures even where a piece lived and died within a record; moves are the
    engine's and the window's; copies back, the host tier's fetches and prefetches);
    ``figures`` (the run's metrics), ``capacity`` and ``records``. Times are in records:
    record i's k-th of n log events happens at i + (k + 1) / (n + 1)."""

    def __init__(self, pieces, marks, figures, capacity, records, title):
        self.pieces = pieces
        self.marks = marks
        self.figures = figures
        self.capacity = capacity
        self.records = records
        self.title = title

    def data(self):
        """The page's data: columns of the pieces, the op names once each."""
        names = sorted({p["op"] for p in self.pieces})
        index = {n: i for i, n in enumerate(names)}
        rows = [[p["offset"], p["size"], p["nbytes"], p["t0"], p["t1"], KINDS.index(p["kind"]),
                 MARKS.index(p["begin"]), MARKS.index(p["end"]), index[p["op"]], p["cost"],
                 p["source"], p["to"]]
                for p in self.pieces]
        return {"title": self.title, "capacity": self.capacity, "records": self.records,
                "figures": self.figures, "kinds": KINDS, "marks": MARKS, "ops": names,
                "columns": ["offset", "size", "nbytes", "t0", "t1", "kind", "begin", "end", "op",
                            "cost", "source", "to"],
                "pieces": rows, "counts": self.marks}


#: collect's and write's host_budget by default: the trace's (its meta host_budget, under an
#: offloading policy; no limit without one)
FROM_TRACE = "the trace's"


def collect(program, budget, policy="coop", alignment=None, thrash=None, lower_bound_bytes=None,
            host_budget=FROM_TRACE, lookahead=None, device=None):
    """Replay program (a coop.trace Program) at budget bytes under policy, taking the arena's
    log record by record; returns a Timeline (its figures as coop.trace.replay.replay's;
    lower_bound_bytes, lookahead and device as there: 0 replays a live run's first step).
    host_budget: the host tier's bytes (None: no limit; bytes or "64GiB"), by default the
    trace's."""
    from coop.budget import parse_budget
    from coop.engine.cost import DEVICES
    from coop.engine.policies import get_policy
    from coop.trace.replay import DEFAULT_ALIGNMENT, DEFAULT_LOOKAHEAD, make_replayer
    align = int(alignment or program.meta.get("alignment") or DEFAULT_ALIGNMENT)
    if host_budget == FROM_TRACE:
        host_budget = program.meta.get("host_budget") if get_policy(policy).offload else None
    elif host_budget is not None:
        host_budget = parse_budget(host_budget)
    # as coop.trace.replay.replay: below the recompute-only bound the tier opens at the start
    arena, replayer, _ = make_replayer(program, int(budget), policy, align,
                                       thrash * program.cost_first if thrash else 0.0,
                                       host_budget,
                                       None if device is None else DEVICES[device].host_link,
                                       DEFAULT_LOOKAHEAD if lookahead is None else lookahead,
                                       lower_bound_bytes=lower_bound_bytes)
    log = _Log(replayer, program)
    status = "ok"
    try:
        for i in range(program.n_records):
            log.step(i, lambda i=i: replayer.run(i, i + 1))
        log.step(program.n_records, replayer.finish)
    except OutOfMemoryError:
        status = "oom"
    except Thrash:
        status = "thrash"
    counters, stats = replayer.counters(), arena.stats()
    tier = replayer.engine.tier_counters()
    figures = {
        "policy": policy, "status": status, "budget_bytes": arena.capacity,
        "peak_used_bytes": stats["peak_used_bytes"], "evictions": stats["evictions"],
        "eager_evictions": counters["eager_evictions"], "recomputes": counters["recomputes"],
        "constants_placed": counters["constants_placed"], "window_moves": stats["window_moves"],
        "bytes_moved": stats["bytes_moved"], "offloads": tier["offloads"],
        "copies_back": tier["fetches"] + tier["prefetches"],
        "host_peak_bytes": tier["host_peak_bytes"],
        "compute_overhead": (counters["cost_total"] / program.cost_first
                             if program.cost_first else 1.0),
        "records": counters["records"], "alignment": align,
    }
    return Timeline(log.close(), log.marks, figures, arena.capacity, log.time,
                    f"{policy} at {_bytes(arena.capacity)}: {status}")


class _Log:
    """The arena's log of one replay, record by record, turned into pieces with owners."""

    def __init__(self, replayer, program):
        self.replayer = replayer
        self.engine = replayer.engine
        self.arena = self.engine.arena
        self.names = program.names
        self.align = self.arena.alignment
        self.open = {}       # offset -> the piece allocated there, not yet freed
        self.pieces = []     # every piece, in allocation order
        self.owner = {}      # storage id -> [op name, producer op] of its current value
        self.resident = {}   # storage id -> its open piece
        self.time = 0
        self.marks = []      # [record, recomputes, evictions, moves] of the records with any

    def step(self, i, run):
        """Run record i (run: a callable) with the arena's log on."""
        ops = self.engine.counters()
        stats = self.arena.stats()
        tier = self.engine.tier_counters()
        self.arena.start_log()
        try:
            run()
        finally:
            events = self.arena.take_log()
            self._settle(i, events, ops)
            after = self.engine.counters()
            now = self.arena.stats()
            host = self.engine.tier_counters()
            counts = [after["recomputes"] - ops["recomputes"],
                      now["evictions"] - stats["evictions"]
                      + after["eager_evictions"] - ops["eager_evictions"],
                      after["constants_placed"] - ops["constants_placed"]
                      + now["window_moves"] - stats["window_moves"],
                      host["offloads"] - tier["offloads"],
                      host["fetches"] + host["prefetches"] - tier["fetches"] - tier["prefetches"]]
            if any(counts):
                self.marks.append([i, *counts])
            self.time = i + 1      # a record that ran out of memory is drawn too

    def _settle(self, i, events, before):
        """Pieces from record i's log; then, from the engine, who owns each one placed and why
        each one freed went. A move of coop's window ends its piece and begins one at the new
        range, of the same storage."""
        records = log_records(events)
        n = len(records)
        new, closed = [], []
        for k, (offset, nbytes, *move) in enumerate(records):
            t = round(i + (k + 1) / (n + 1), 6)
            if nbytes == LOG_MOVE:
                dst, size, sid = move
                old = self.open.pop(offset)
                old["t1"], old["end"], old["to"], old["sid"] = t, "moved", dst, sid
                piece = dict(old, offset=dst, size=size, t0=t, t1=None, begin="moved", end="",
                             source=offset, to=-1, origin=old)
                self.open[dst] = piece
                self.pieces.append(piece)
                new.append(piece)
            elif nbytes >= 0:
                piece = {"offset": offset, "size": -(-max(nbytes, 1) // self.align) * self.align,
                         "nbytes": nbytes, "t0": t, "t1": None, "kind": "transient",
                         "begin": "", "end": "", "op": "", "cost": 0.0, "sid": None,
                         "source": -1, "to": -1, "origin": None}
                self.open[offset] = piece
                self.pieces.append(piece)
                new.append(piece)
            else:
                piece = self.open.pop(offset)
                piece["t1"] = t
                closed.append(piece)
        after = self.engine.counters()
        first_run = after["ops"] > before["ops"]
        moved = after["constants_placed"] > before["constants_placed"]
        released = after["releases"] > before["releases"] and not first_run
        name = self.names[self.replayer.last_op] if first_run else ""
        engine = self.engine
        known = dict(self.owner)          # storages known before this record
        was = dict(self.resident)
        # who owns the pieces still open: the arena knows each piece's storage
        sid_at = {}
        if any(p["t1"] is None for p in new):
            sid_at = {offset: sid for offset, _, free, sid in self.arena.pieces() if not free}
        for piece in new:
            origin = piece["origin"]
            if origin is not None:               # moved here: the storage's piece, elsewhere
                piece["kind"], piece["op"], piece["cost"] = (origin["kind"], origin["op"],
                                                             origin["cost"])
                self.resident[piece["sid"]] = piece
                continue
            if piece["t1"] is None:
                sid = sid_at.get(piece["offset"], -1)
            elif piece["sid"] is not None:       # placed, then moved by the window
                sid = piece["sid"]
            else:
                continue                         # transient
            info = engine.info(sid) if sid >= 0 else None
            if info is None:
                piece["kind"], piece["op"] = "constant", name   # an anonymous piece held on
                continue
            producer = info["producer"]
            owner = known.get(sid)
            if owner is None or (first_run and producer is not None and owner[1] != producer):
                owner = [name, producer]      # a new value (or a new producer: an in-place op)
            elif (old := was.get(sid)) is not None and old["t1"] is not None and moved:
                piece["begin"], piece["source"] = "moved", old["offset"]   # a constant settled
            elif info["on_host"] == 2:
                piece["begin"] = "fetched"    # back from the host tier, its copy kept there
            elif old is None or old["t1"] is not None:
                piece["begin"] = "recomputed"
            self.owner[sid] = owner
            piece["sid"], piece["op"] = sid, owner[0]
            if producer is None:
                piece["kind"] = "constant"
            else:
                piece["kind"] = "expensive" if engine.placement(producer) == EXPENSIVE else "cheap"
                piece["cost"] = engine.op_cost(producer)
            self.resident[sid] = piece
        for piece in closed:
            sid = piece["sid"]
            if sid is None:
                continue
            if self.resident.get(sid) is piece:
                del self.resident[sid]
            info = engine.info(sid)
            if info is None or released:
                piece["end"] = "released"
            elif info["on_host"] and sid not in self.resident:
                piece["end"] = "offloaded"
            elif moved and sid in self.resident:
                piece["end"], piece["to"] = "moved", self.resident[sid]["offset"]
            else:
                piece["end"] = "evicted"
        # storages whose records died this record
        for sid in [s for s in self.owner if s not in self.resident and engine.info(s) is None]:
            del self.owner[sid]

    def close(self):
        for piece in self.open.values():
            piece["t1"] = self.time
        for piece in self.pieces:
            del piece["sid"], piece["origin"]
        return self.pieces


def render(timeline):
    """The timeline as one self-contained HTML page (a str)."""
    f = timeline.figures
    figures = [("policy", f["policy"]), ("status", f["status"]),
               ("budget", _bytes(f["budget_bytes"])), ("peak", _bytes(f["peak_used_bytes"])),
               ("evictions", f"{f['evictions']:,}"),
               ("eager evictions", f"{f['eager_evictions']:,}"),
               ("recomputes", f"{f['recomputes']:,}"),
               ("window moves", f"{f['window_moves']:,}"),
               ("bytes moved", _bytes(f["bytes_moved"])),
               ("constants placed", f"{f['constants_placed']:,}"),
               *([("offloads", f"{f['offloads']:,}"), ("copies back", f"{f['copies_back']:,}"),
                  ("host tier peak", _bytes(f["host_peak_bytes"]))] if f["offloads"] else []),
               ("overhead", f"{f['compute_overhead']:.3f}"),
               ("records", f"{f['records']:,}"), ("pieces", f"{len(timeline.pieces):,}")]
    header = "".join(f'<div class="figure" data-name="{html.escape(k)}"><span>{html.escape(k)}'
                     f'</span><b>{html.escape(str(v))}</b></div>' for k, v in figures)
    legend = "".join(f'<span class="key"><i class="swatch k-{k}"></i>{k}</span>'
                     for k in (*KINDS, "free"))
    legend += "".join(f'<span class="key"><i class="tickmark m-{m}"></i>{m}</span>'
                      for m in ("evicted", "recomputed", "moved", "offloaded", "fetched"))
    payload = json.dumps(timeline.data(), separators=(",", ":")).replace("</", "<\\/")
    script = resources.files("coop.trace").joinpath("timeline.js").read_text(encoding="utf-8")
    return _PAGE.format(title=html.escape(timeline.title), header=header, legend=legend,
                        style=_STYLE, data=payload, script=script)


def write(trace, path, budget=None, ratio=None, policy="coop", alignment=None, thrash=None,
          format=None, lower_bound_bytes=None, host_budget=FROM_TRACE, lookahead=None,
          device=None):
    """Replay trace (a path or Program) at budget (bytes, "6GiB") or ratio (of its unlimited
    peak) under policy and write its timeline to path; returns the Timeline (host_budget,
    lookahead and device: the host tier's, as collect takes them)."""
    from coop.trace import replay as R
    from coop.budget import parse_budget
    program = R._program(trace) if format is None else R.load(trace, format)
    if (budget is None) == (ratio is None):
        raise ValueError("give exactly one of budget (bytes) and ratio (of the unlimited peak)")
    if ratio is not None:
        align = R._alignment(program, alignment)
        budget = max(int(ratio * R.peak(program, align)), align)
    timeline = collect(program, parse_budget(budget), policy, alignment, thrash,
                       lower_bound_bytes, host_budget, lookahead, device)
    with open(os.fspath(path), "w", encoding="utf-8") as out:
        out.write(render(timeline))
    return timeline


@contextlib.contextmanager
def recording(runtime, path):
    """Runtime.timeline: record the program from now on as a trace (in a temporary file), and
    on exit draw its replay at the runtime's budget and policy, which takes the run's
    evictions and recomputes (tests/test_replay.py, tests/test_record_anytime.py)."""
    with tempfile.TemporaryDirectory(prefix="coop-timeline-") as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        recorder = runtime.record(trace)    # refuses a runtime that records already
        try:
            with recorder:
                yield
        finally:
            # compiled here, not by coop.trace.load, which refuses the trace of a stretch that
            # ran no op (no record but meta): its page is an empty one
            from coop.trace.compile import compile_program
            from coop.trace.records import read_records
            write(compile_program(read_records(trace), trace), path,
                  budget=runtime.arena.capacity, policy=runtime.policy,
                  alignment=runtime.arena.alignment)


def _bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


_STYLE = """
body{font:14px system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px 20px;color:#222;
background:#fff}
h1{font-size:17px;font-weight:600;margin:0 0 10px}
#figures{display:flex;flex-wrap:wrap;gap:6px;margin-bottom:10px}
.figure{border:1px solid #ddd;border-radius:6px;padding:4px 10px;background:#fafafa}
.figure span{display:block;font-size:11px;color:#666;text-transform:uppercase;letter-spacing:.03em}
.figure b{font-size:15px}
#legend{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin-bottom:6px;font-size:13px}
.key{display:inline-flex;align-items:center;gap:5px}
.swatch{display:inline-block;width:14px;height:14px;border:1px solid #0003}
.tickmark{display:inline-block;width:4px;height:14px}
#controls{display:flex;gap:6px;align-items:center;margin-bottom:6px;font-size:13px}
button{font:inherit;padding:2px 9px;border:1px solid #bbb;border-radius:4px;background:#f6f6f6;
cursor:pointer}
#range{color:#555;margin-left:8px}
#plot{position:relative;user-select:none}
#chart{display:block;border:1px solid #e3e3e3;background:#fff}
#view{background:#f1f1f1}
.frame{fill:#f1f1f1}
.piece{stroke:#fff;stroke-width:.6;vector-effect:non-scaling-stroke}
.piece.hover{stroke:#000;stroke-width:1.5}
.k-constant{fill:#8c8c8c;background:#8c8c8c}
.k-expensive{fill:#2f6fb3;background:#2f6fb3}
.k-cheap{fill:#f4a236;background:#f4a236}
.k-transient{fill:#b9a3d6;background:#b9a3d6}
.k-free{fill:#f1f1f1;background:#f1f1f1}
.mark{stroke-width:2.5;vector-effect:non-scaling-stroke;pointer-events:none}
.lane-mark{stroke:none}
.link{stroke-width:1.5;stroke-opacity:.7;vector-effect:non-scaling-stroke;pointer-events:none}
rect.m-evicted,rect.m-recomputed,rect.m-moved,rect.m-offloaded,rect.m-fetched{fill:currentColor}
.m-offloaded{stroke:#0b7d86;background:#0b7d86;color:#0b7d86}
.m-fetched{stroke:#c2185b;background:#c2185b;color:#c2185b}
.m-evicted{stroke:#d62728;background:#d62728;color:#d62728}
.m-recomputed{stroke:#1a9e3f;background:#1a9e3f;color:#1a9e3f}
.m-moved{stroke:#8e44ad;background:#8e44ad;color:#8e44ad}
.tick{stroke:#888}
.tick-label{font-size:11px;fill:#555}
.axis-label{font-size:12px;fill:#333}
.lane-label{font-size:9.5px;fill:#666}
#tooltip{position:absolute;pointer-events:none;white-space:pre;background:#222e;color:#fff;
font-size:12px;line-height:1.45;padding:6px 9px;border-radius:5px;z-index:2}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>coop memory timeline: {title}</title>
<style>{style}</style></head>
<body>
<h1>coop memory timeline: {title}</h1>
<div id="figures">{header}</div>
<div id="legend">{legend}</div>
<div id="controls"><button id="zoom-in" title="zoom in on the records">+</button><button
 id="zoom-out" title="zoom out">&minus;</button><button id="zoom-in-y"
 title="zoom in on the addresses">+ address</button><button id="zoom-out-y">&minus; address</button
><button id="reset">reset</button><span id="range"></span></div>
<div id="plot"><svg id="chart" xmlns="http://www.w3.org/2000/svg" width="1100" height="584">
<rect class="frame" x="70" y="10" width="1010" height="60"></rect>
<svg id="lane" x="70" y="10" width="1010" height="60" preserveAspectRatio="none"></svg>
<rect class="frame" x="70" y="78" width="1010" height="456"></rect>
<svg id="view" x="70" y="78" width="1010" height="456" preserveAspectRatio="none"></svg>
<g id="axes"></g></svg><div id="tooltip" hidden></div></div>
<p style="font-size:12px;color:#666">Wheel: zoom the records (shift: the addresses); drag: pan;
double-click: reset. Hover a piece for its op, size, cost and lifetime.</p>
<script type="application/json" id="timeline-data">{data}</script>
<script>{script}</script>
</body></html>
"""
