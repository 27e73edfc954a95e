"""The memory timeline (coop.trace.timeline): its pieces are the arena's allocation log of the replay,
each with its owner's kind and how it began and ended; its marks add up to the run's counters;
the page is self-contained; and in a real browser (headless Chromium driven by selenium) the
drawn pieces, the tooltip and the zoom are what the data says."""
import json
import re
import shutil

import numpy as np
import pytest
from _arena import SEARCH_TIMES
from _gradcheck import deep_mlp, deep_mlp_loss
from _graphs import ADDC
from _traces import write_trace

import coop
import coop.trace.replay as R
from coop.trace import timeline
from coop.cli.main import main as coop_main
from coop._core import LOG_MOVE, log_records
from coop.trace._replay import Replayer
from coop.optim import AdamW
from coop.trace import load

K = 1024


def call(name, inputs, out, cost, cls, size=K):
    return {"op": "call", "name": name, "inputs": inputs, "cost": cost, "cls": cls,
            "outputs": [{"id": out, "size": size, "alias": -1}]}


#: a program in 4 KiB: matmul's output is evicted for the second matmul and recomputed for
#: the add; the second relu's is evicted for the add's output and recomputed at the end
RECORDS = [{"op": "meta", "alignment": 512},
           {"op": "constant", "id": 0, "size": K},
           call("matmul", [0], 1, 100.0, "expensive"),
           call("relu", [1], 2, 10.0, "cheap"),
           call("relu", [2], 3, 10.0, "cheap"),
           call("matmul", [3, 0], 4, 100.0, "expensive"),
           {"op": "release", "id": 4},
           call("add", [1, 2], 5, 10.0, "cheap"),
           {"op": "release", "id": 5}]
#: its pieces, in allocation order: (offset, size, kind, begin, end, op)
PIECES = [(0, K, "constant", "", "", ""),
          (K, K, "expensive", "", "evicted", "matmul"),
          (3 * K, K, "cheap", "", "", "relu"),
          (2 * K, K, "cheap", "", "evicted", "relu"),
          (K, K, "expensive", "", "released", "matmul"),
          (K, K, "expensive", "recomputed", "", "matmul"),
          (2 * K, K, "cheap", "", "released", "add"),
          (2 * K, K, "cheap", "recomputed", "", "relu")]


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "small.jsonl", RECORDS)


#: a program in 3.5 KiB where coop's window moves: weights (costly to recompute) sit on a wall
#: between fill's freed KiB and 1.5 KiB free; grow's 2 KiB fit where weights moves up (coop,
#: copying 1 KiB at 0.01 per byte) or where weights is evicted (coop, recomputing it for add)
MOVE_RECORDS = [{"op": "meta", "alignment": 512, "copy_cost": 0.01},
                call("fill", [], 1, 10.0, "expensive"),
                call("weights", [], 2, 1e6, "expensive"),
                {"op": "release", "id": 1},
                call("grow", [], 3, 10.0, "cheap", 2 * K),
                call("add", [2, 3], 4, 10.0, "cheap", 512),
                {"op": "release", "id": 4}]
MOVE_BUDGET = 3 * K + 512
#: its whole log under coop: weights (storage 1) moves from 1 KiB to 2 KiB before grow's
#: allocation, in record 3
MOVE_LOG = [0, K, K, K, 0, -1, K, LOG_MOVE, 2 * K, K, 1, 0, 2 * K, 3 * K, 512, 3 * K, -1]
#: its pieces: (offset, size, kind, begin, end, op, source, to); weights at both ranges
MOVE_PIECES = [(0, K, "expensive", "", "released", "fill", -1, -1),
               (K, K, "expensive", "", "moved", "weights", -1, 2 * K),
               (2 * K, K, "expensive", "moved", "", "weights", K, -1),
               (0, 2 * K, "cheap", "", "", "grow", -1, -1),
               (3 * K, 512, "cheap", "", "released", "add", -1, -1)]


@pytest.fixture
def move_trace(tmp_path):
    return write_trace(tmp_path / "move.jsonl", MOVE_RECORDS)


def whole_log(path, budget, policy="coop-no-move"):
    """The arena's allocation log of one replay taken whole: [(offset, bytes)] allocated."""
    arena = coop.Arena(budget, 512)
    replayer = Replayer(load(path), arena, policy)
    arena.start_log()
    replayer.run()
    replayer.finish()
    return [(e[0], e[1]) for e in log_records(arena.take_log()) if e[1] >= 0]


def replay_logged(path, budget, policy, log):
    """Replay path record by record as a timeline does, with the arena's log on (log=True) or
    off, checking the arena after each record; the arena, the replayer and the log."""
    program = load(path)
    arena = coop.Arena(budget, 512)
    replayer = Replayer(program, arena, policy, 0.0, R.copy_cost(program))
    events = []
    for i in range(program.n_records):
        if log:
            arena.start_log()
        replayer.run(i, i + 1)
        events += arena.take_log()
        arena.check()
    replayer.finish()
    arena.check()
    return arena, replayer, events


def page_data(path):
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="timeline-data">(.*?)</script>', text,
                      re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_the_pieces_are_the_arena_log_with_their_owners(trace, tmp_path):
    tl = timeline.write(trace, tmp_path / "t.html", budget=4 * K)
    got = [(p["offset"], p["size"], p["kind"], p["begin"], p["end"], p["op"]) for p in tl.pieces]
    assert got == PIECES
    assert [(p["offset"], p["nbytes"]) for p in tl.pieces] == whole_log(trace, 4 * K)
    result = R.replay(trace, budget=4 * K, thrash=None)
    for key in ("evictions", "eager_evictions", "recomputes", "peak_used_bytes",
                "compute_overhead", "status"):
        assert tl.figures[key] == result[key], key
    # each record's marks: [record, recomputes, evictions, moves]
    assert tl.marks == [[4, 0, 1, 0, 0, 0], [6, 1, 1, 0, 0, 0], [8, 1, 0, 0, 0, 0]]
    assert [p["t0"] for p in tl.pieces][:3] == [0.5, 1.5, 2.5]   # records 0, 1, 2: one event
    assert tl.pieces[1]["t1"] == 4.333333                         # record 4: 1st of 2 events


def test_a_failed_kernel_leaves_the_owners_of_later_pieces_as_they_were(tmp_path):
    """A failed call (docs/trace-format.md) runs no op: the pieces after it keep their own ops'
    names."""
    failed = {"op": "call", "name": "oops", "inputs": [1], "outputs": [], "cost": 0,
              "cls": "cheap", "failed": True}
    path = write_trace(tmp_path / "failed.jsonl", RECORDS[:3] + [failed] + RECORDS[3:])
    tl = timeline.write(path, tmp_path / "t.html", budget=4 * K)
    assert [(p["offset"], p["size"], p["kind"], p["begin"], p["end"], p["op"])
            for p in tl.pieces] == PIECES


def test_a_run_out_of_memory_is_drawn_up_to_the_failed_record(trace, tmp_path):
    tl = timeline.write(trace, tmp_path / "t.html", budget=3 * K)
    assert tl.figures["status"] == R.replay(trace, budget=3 * K)["status"] == "oom"
    # records 0-5 ran; record 6 (the add) recomputed both its inputs, then found no room
    assert (tl.figures["records"], tl.records) == (6, 7)
    assert all(p["t0"] < p["t1"] <= 7 for p in tl.pieces)
    assert [(p["begin"], p["t1"]) for p in tl.pieces[-2:]] == [("recomputed", 7)] * 2
    assert tl.marks[-1] == [6, 2, 1, 0, 0, 0]


def test_the_page_is_self_contained(trace, tmp_path):
    timeline.write(trace, tmp_path / "t.html", budget=4 * K)
    text = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert not re.search(r"\b(src|href)\s*=", text)
    assert set(re.findall(r"https?://[^\s\"']+", text)) == {"http://www.w3.org/2000/svg"}
    data = page_data(tmp_path / "t.html")
    assert len(data["pieces"]) == len(PIECES) and data["capacity"] == 4 * K


def test_the_log_has_each_move_of_the_window_where_it_happens(move_trace):
    """Under coop the log records weights' move (old, LOG_MOVE, new, size, storage) in the
    record that made it, before grow's allocation; the moves and bytes in it are the arena's
    counters; logging changes no decision."""
    arena, replayer, log = replay_logged(move_trace, MOVE_BUDGET, "coop", True)
    assert log == MOVE_LOG
    moves = [e for e in log_records(log) if e[1] == LOG_MOVE]
    stats = arena.stats()
    assert (stats["window_moves"], stats["bytes_moved"]) == (len(moves), sum(m[3] for m in moves))
    assert (stats["window_moves"], stats["evictions"]) == (1, 0)
    assert arena.pieces()[:2] == [(0, 2 * K, False, 0), (2 * K, K, False, 1)]
    unlogged, unlogged_replayer, nothing = replay_logged(move_trace, MOVE_BUDGET, "coop",
                                                         False)
    assert nothing == []
    assert unlogged_replayer.counters() == replayer.counters()
    assert {k: v for k, v in unlogged.stats().items() if k not in SEARCH_TIMES} == \
        {k: v for k, v in stats.items() if k not in SEARCH_TIMES}
    assert arena.pieces() == unlogged.pieces()


def test_a_moved_piece_is_drawn_at_both_ranges(move_trace, tmp_path):
    """weights is drawn at 1 KiB up to its move (record 3, the first of its two log events)
    and at 2 KiB after, each end marked moved with where it went or came from; coop, without
    moves, evicts it instead. The figures are the replay's."""
    tl = timeline.write(move_trace, tmp_path / "t.html", budget=MOVE_BUDGET, policy="coop")
    got = [(p["offset"], p["size"], p["kind"], p["begin"], p["end"], p["op"], p["source"],
            p["to"]) for p in tl.pieces]
    assert got == MOVE_PIECES
    assert tl.pieces[1]["t1"] == tl.pieces[2]["t0"] == 3.333333
    assert tl.pieces[2]["t1"] == tl.records == 7
    assert tl.marks == [[3, 0, 0, 1, 0, 0]]   # record, recomputes, evictions, moves, 0, 0
    result = R.replay(move_trace, budget=MOVE_BUDGET, policy="coop", thrash=None)
    for key in ("window_moves", "bytes_moved", "evictions", "recomputes", "compute_overhead",
                "peak_used_bytes", "status"):
        assert tl.figures[key] == result[key], key
    assert (tl.figures["window_moves"], tl.figures["bytes_moved"]) == (1, K)
    data = page_data(tmp_path / "t.html")
    col = data["columns"]
    moved = [[p[col.index(c)] for c in ("offset", "begin", "end", "source", "to")]
             for p in data["pieces"] if data["marks"][p[col.index("begin")]] == "moved"
             or data["marks"][p[col.index("end")]] == "moved"]
    assert moved == [[K, 0, 4, -1, 2 * K], [2 * K, 4, 0, K, -1]]
    text = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert '<div class="figure" data-name="window moves"><span>window moves</span><b>1</b>' in text
    assert '<div class="figure" data-name="bytes moved"><span>bytes moved</span><b>1.00 KiB</b>' \
        in text

    coop_tl = timeline.write(move_trace, tmp_path / "c.html", budget=MOVE_BUDGET, policy="coop-no-move")
    assert (coop_tl.figures["window_moves"], coop_tl.figures["evictions"]) == (0, 1)
    assert [p["end"] for p in coop_tl.pieces if p["op"] == "weights"][0] == "evicted"


def pieces_overlap(data):
    """Pairs of drawn pieces that share an address at one time (none may)."""
    col = {c: i for i, c in enumerate(data["columns"])}
    p = np.array([[r[col["offset"]], r[col["size"]], r[col["t0"]], r[col["t1"]]]
                  for r in data["pieces"]], dtype=float)
    lo, hi, t0, t1 = p[:, 0], p[:, 0] + p[:, 1], p[:, 2], p[:, 3]
    both = ((lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
            & (t0[:, None] < t1[None, :]) & (t0[None, :] < t1[:, None]))
    np.fill_diagonal(both, False)
    return np.argwhere(both).tolist()


def train(rt, steps):
    x, targets, params = deep_mlp(rt, depth=24, width=16, batch=128)
    opt = AdamW(params, lr=1e-2)
    for k in range(steps):
        loss = deep_mlp_loss(x, targets, params)
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
        yield k


def test_a_runtime_draws_the_rest_of_its_run(tmp_path):
    """rt.timeline entered mid-run draws the run's own evictions, recomputes and moves: its
    marks add up to the run's counters over the window, record by record."""
    rt = coop.Runtime(coop.numpy_allocator(360 * K), cost="cpu")
    steps = train(rt, 3)
    next(steps)
    before = rt.stats()
    with rt.timeline(tmp_path / "run.html"):
        for _ in steps:
            pass
    after = rt.stats()
    data = page_data(tmp_path / "run.html")
    delta = {k: after[k] - before[k] for k in ("evictions", "eager_evictions", "recomputes",
                                                "constants_placed")}
    assert delta["evictions"] > 0 and delta["recomputes"] > 0 and delta["constants_placed"] > 0
    assert {k: data["figures"][k] for k in delta} == delta
    sums = np.array([m[1:] for m in data["counts"]]).sum(axis=0).tolist()
    moves = delta["constants_placed"] + data["figures"]["window_moves"]
    assert sums == [delta["recomputes"], delta["evictions"] + delta["eager_evictions"], moves,
                    0, 0]
    col = data["columns"]
    moved = sum(p[col.index("begin")] == timeline.MARKS.index("moved") for p in data["pieces"])
    assert moved == moves
    assert pieces_overlap(data) == []


def test_a_runtime_with_a_moving_policy_draws_its_moves(tmp_path):
    """rt.timeline under coop: the page's figures are the run's over the window, window
    moves and bytes moved included; each window move is a piece ending where the next of its
    storage begins, the ranges the arena moved it between; no two pieces overlap."""
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="a100-80gb")
    for _ in train(rt, 3):
        pass
    peak = rt.stats()["peak_used_bytes"]
    rt = coop.Runtime(coop.numpy_allocator(int(0.75 * peak)), policy="coop",
                      cost="a100-80gb")
    steps = train(rt, 3)
    next(steps)
    before = rt.stats()
    with rt.timeline(tmp_path / "run.html"):
        for _ in steps:
            pass
    rt.arena.check()
    after = rt.stats()
    data = page_data(tmp_path / "run.html")
    keys = ("evictions", "eager_evictions", "recomputes", "constants_placed", "window_moves",
            "bytes_moved")
    delta = {k: after[k] - before[k] for k in keys}
    assert delta["window_moves"] > 0 and delta["bytes_moved"] > 0
    assert {k: data["figures"][k] for k in keys} == delta
    col = {c: i for i, c in enumerate(data["columns"])}
    rows = data["pieces"]
    # each piece that moved, and the one its bytes went to, in the same record: a window move
    # at one time (the log's move), the engine's copy of a constant from its allocation on
    pairs = [(r, s) for r in rows if r[col["to"]] >= 0 for s in rows
             if s[col["source"]] == r[col["offset"]] and s[col["offset"]] == r[col["to"]]
             and int(s[col["t0"]]) == int(r[col["t1"]]) and s[col["t0"]] <= r[col["t1"]]]
    ends = sum(r[col["end"]] == timeline.MARKS.index("moved") for r in rows)
    assert len(pairs) == ends == delta["constants_placed"] + delta["window_moves"]
    window = [(r, s) for r, s in pairs if s[col["t0"]] == r[col["t1"]]]
    assert len(window) == delta["window_moves"]
    assert sum(r[col["size"]] for r, _ in window) == delta["bytes_moved"]
    assert all(r[col["size"]] == s[col["size"]] for r, s in pairs)
    assert all(r[col["op"]] == s[col["op"]] and r[col["kind"]] == s[col["kind"]]
               for r, s in window)
    sums = np.array([m[1:] for m in data["counts"]]).sum(axis=0).tolist()
    assert sums[2] == delta["constants_placed"] + delta["window_moves"]
    assert pieces_overlap(data) == []


def test_a_runtime_that_records_already_cannot_draw(tmp_path, rt):
    with rt.record(tmp_path / "t.jsonl"):
        with pytest.raises(ValueError, match="recording a trace already"):
            with rt.timeline(tmp_path / "t.html"):
                pass


def test_a_recording_inside_another_is_refused_and_the_outer_one_goes_on(tmp_path, rt):
    x = rt.tensor(np.ones(64))
    outer = tmp_path / "outer.jsonl"
    with rt.record(outer):
        rt.apply(ADDC, x, c=1.0)
        with pytest.raises(ValueError, match=r"this runtime is recording a trace already "
                                             r"\(Runtime.record or Runtime.timeline\): one "
                                             r"recording at a time; end that one first"):
            rt.record(tmp_path / "inner.jsonl")
        with pytest.raises(ValueError, match="recording a trace already \\(Runtime.record or "):
            with rt.timeline(tmp_path / "inner.html"):
                pass
        rt.apply(ADDC, x, c=2.0)
    assert not (tmp_path / "inner.jsonl").exists()
    calls = [r for r in map(json.loads, outer.read_text().splitlines()) if r["op"] == "call"]
    assert [r["name"] for r in calls] == ["add_scalar", "add_scalar"]   # both ops recorded
    with rt.timeline(tmp_path / "t.html"):
        with pytest.raises(ValueError, match="recording a trace already"):
            rt.record(tmp_path / "inner.jsonl")
        rt.apply(ADDC, x, c=3.0)
    assert (tmp_path / "t.html").exists()


def test_coop_replay_writes_one_timeline_per_policy(trace, tmp_path, capsys):
    out = tmp_path / "out.html"
    assert coop_main(["replay", str(trace), "--budget", "4KiB", "--timeline", str(out)]) == 0
    assert len(page_data(out)["pieces"]) == len(PIECES)
    assert coop_main(["replay", str(trace), "--budget", "4KiB", "--policy", "coop,dtr",
                      "--timeline", str(out)]) == 0
    for policy in ("coop", "dtr"):
        data = page_data(tmp_path / f"out-{policy}.html")
        assert data["figures"]["policy"] == policy
        assert [(p[0], p[2]) for p in data["pieces"]] == whole_log(trace, 4 * K, policy)
    assert f"timeline of dtr: {tmp_path / 'out-dtr.html'}" in capsys.readouterr().out


def test_moving_only_when_blocked_evicts_what_coop_moves(move_trace):
    """coop-move-if-blocked: evicting weights (c' 1e6) alone makes room for grow, so it evicts
    weights where coop moves them (a copy of 10.24 ns); then it runs as coop-no-move does."""
    runs = {p: R.replay(move_trace, budget=MOVE_BUDGET, policy=p, thrash=None)
            for p in ("coop", "coop-move-if-blocked", "coop-no-move")}
    assert (runs["coop"]["window_moves"], runs["coop"]["evictions"]) == (1, 0)
    blocked, no_move = runs["coop-move-if-blocked"], runs["coop-no-move"]
    assert (blocked["window_moves"], blocked["evictions"]) == (0, 1)
    for key in ("evictions", "recomputes", "cost_total", "peak_used_bytes", "status"):
        assert blocked[key] == no_move[key], key
    assert blocked["cost_total"] > runs["coop"]["cost_total"] + 1e5


def test_coop_replay_draws_a_moving_policy(move_trace, tmp_path):
    out = tmp_path / "out.html"
    assert coop_main(["replay", str(move_trace), "--budget", "3.5KiB", "--policy",
                      "coop", "--timeline", str(out)]) == 0
    data = page_data(out)
    assert (data["figures"]["window_moves"], data["figures"]["bytes_moved"]) == (1, K)
    col = data["columns"]
    assert [(p[col.index("offset")], p[col.index("source")], p[col.index("to")])
            for p in data["pieces"]] == [(p[0], p[6], p[7]) for p in MOVE_PIECES]


# ---- in a browser -----------------------------------------------------------------------------

def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="selenium is not installed: pip install '.[test]'")
    binary, driver = _chromium(), shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.skip("no Chromium and chromedriver found: apt-get install -y chromium "
                    "chromium-driver (.ci/run installs them)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1180,800"):
        options.add_argument(arg)
    session = webdriver.Chrome(options=options, service=Service(driver))
    yield session
    session.quit()


def test_the_browser_draws_the_pieces_hovers_and_zooms(browser, trace, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    from selenium.webdriver.common.by import By
    page = tmp_path / "t.html"
    timeline.write(trace, page, budget=4 * K)
    browser.get(page.as_uri())
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('#view rect.piece')].map(r => ["
        "+r.dataset.offset, +r.dataset.size, r.dataset.kind, r.dataset.begin, r.dataset.end,"
        " r.dataset.op])")
    assert [tuple(d) for d in drawn] == PIECES
    assert [(d[0], d[1]) for d in drawn] == whole_log(trace, 4 * K)
    marks = browser.execute_script(
        "return [...document.querySelectorAll('#view line.mark')]"
        ".map(l => l.getAttribute('class'))")
    assert sorted(marks) == ["mark m-evicted"] * 2 + ["mark m-recomputed"] * 2
    figure = browser.find_element(By.CSS_SELECTOR, '#figures [data-name="evictions"] b')
    assert figure.text == "2"

    piece = browser.find_element(By.CSS_SELECTOR, '#view rect.piece[data-i="1"]')
    ActionChains(browser).move_to_element(piece).perform()
    tip = browser.find_element(By.ID, "tooltip")
    assert tip.is_displayed()
    assert tip.get_attribute("textContent").split("\n") == [
        "matmul \u2014 expensive", "1,024 bytes (1.00 KiB in the arena) at offset 1,024",
        "cost 100.0 ns", "records 1.50 \u2192 4.33, then evicted"]

    span = browser.find_element(By.ID, "range")
    assert (float(span.get_attribute("data-x0")), float(span.get_attribute("data-x1"))) == (0, 9)
    browser.find_element(By.ID, "zoom-in").click()
    assert (float(span.get_attribute("data-x0")), float(span.get_attribute("data-x1"))) == \
        (2.25, 6.75)
    assert browser.execute_script(
        "return document.getElementById('view').getAttribute('viewBox')") == "2.25 0 4.5 1000"
    browser.find_element(By.ID, "reset").click()
    assert float(span.get_attribute("data-x1")) == 9
    # the wheel zooms around the pointer: the record under it stays put
    view = browser.find_element(By.ID, "view")
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(view), 0, -100).perform()
    x0, x1 = float(span.get_attribute("data-x0")), float(span.get_attribute("data-x1"))
    assert x1 - x0 == pytest.approx(9 / 1.25) and x0 == pytest.approx(9 * 0.2 / 2, abs=0.05)

    shot = tmp_path / "timeline.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_browser_draws_a_moved_piece_at_both_ranges(browser, move_trace, tmp_path):
    """weights' two rects, at 1 KiB then 2 KiB, meet at the move, each marked moved; their
    tooltips say from where to where; the figures count the move and its bytes."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    page = tmp_path / "t.html"
    timeline.write(move_trace, page, budget=MOVE_BUDGET, policy="coop")
    browser.get(page.as_uri())
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('#view rect.piece')].map(r => ["
        "+r.dataset.offset, +r.dataset.size, r.dataset.kind, r.dataset.begin, r.dataset.end,"
        " r.dataset.op, +r.dataset.source, +r.dataset.to])")
    assert [tuple(d) for d in drawn] == MOVE_PIECES
    rects = browser.execute_script(
        "return [1, 2].map(i => document.querySelector(`#view rect.piece[data-i='${i}']`))"
        ".map(r => [+r.getAttribute('x'), +r.getAttribute('width'), +r.getAttribute('y'),"
        " +r.getAttribute('height')])")
    (x1, w1, y1, h1), (x2, w2, y2, h2) = rects
    assert (x1, x1 + w1, x2) == pytest.approx((1.5, 10 / 3, 10 / 3), abs=1e-6)
    # address up, 1000 units from the top of 3.5 KiB: [1, 2) KiB, then [2, 3) KiB
    assert (y1, y2, h1, h2) == pytest.approx((1.5 / 3.5 * 1000, 0.5 / 3.5 * 1000,
                                              1000 / 3.5, 1000 / 3.5))
    marks = browser.execute_script(
        "return [...document.querySelectorAll('#view line.mark')]"
        ".map(l => [l.getAttribute('class'), +l.dataset.i, +l.getAttribute('x1')])")
    assert [(c, i) for c, i, _ in marks] == [("mark m-moved", 1), ("mark m-moved", 2)]
    assert [x for *_, x in marks] == pytest.approx([10 / 3] * 2, abs=1e-6)
    # and a line at the move from the old range's middle to the new one's
    link = browser.execute_script(
        "const l = document.querySelector('#view line.link');"
        "return [l.getAttribute('class'), +l.dataset.i, +l.getAttribute('x1'),"
        " +l.getAttribute('y1'), +l.getAttribute('y2')]")
    assert link[:2] == ["link m-moved", 2]
    assert link[2:] == pytest.approx([10 / 3, y1 + h1 / 2, y2 + h2 / 2], abs=1e-6)
    lane = browser.execute_script(
        "return [...document.querySelectorAll('#lane rect.lane-mark')]"
        ".map(r => [r.dataset.mark, +r.dataset.record, +r.dataset.count])")
    assert lane == [["moved", 3, 1]]
    for name, text in (("window moves", "1"), ("bytes moved", "1.00 KiB"),
                       ("evictions", "0")):
        assert browser.find_element(
            By.CSS_SELECTOR, f'#figures [data-name="{name}"] b').text == text

    tip = browser.find_element(By.ID, "tooltip")
    lines = {}
    for i in (1, 2):
        piece = browser.find_element(By.CSS_SELECTOR, f'#view rect.piece[data-i="{i}"]')
        ActionChains(browser).move_to_element(piece).perform()
        assert tip.is_displayed()
        lines[i] = tip.get_attribute("textContent").split("\n")
    assert lines[1] == ["weights \u2014 expensive",
                        "1,024 bytes (1.00 KiB in the arena) at offset 1,024",
                        "cost 1.000 ms", "records 1.50 \u2192 3.33, then moved to offset 2,048"]
    assert lines[2] == ["weights \u2014 expensive",
                        "1,024 bytes (1.00 KiB in the arena) at offset 2,048", "cost 1.000 ms",
                        "records 3.33 \u2192 7.00, moved from offset 1,024, alive at the end"]
