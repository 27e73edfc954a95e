"""The memory timeline (coop.timeline): its pieces are the arena's allocation log of the replay,
each with its owner's kind and how it began and ended; its marks add up to the run's counters;
the page is self-contained; and in a real browser (headless Chromium driven by selenium) the
drawn pieces, the tooltip and the zoom are what the data says."""
import json
import re
import shutil

import numpy as np
import pytest
from _gradcheck import deep_mlp, deep_mlp_loss

import coop
import coop.replay as R
from coop import timeline
from coop.__main__ import main as coop_main
from coop._replay import Replayer
from coop.optim import AdamW
from coop.trace import load

K = 1024


def call(name, inputs, out, cost, cls):
    return {"op": "call", "name": name, "inputs": inputs, "cost": cost, "cls": cls,
            "outputs": [{"id": out, "size": K, "alias": -1}]}


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
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


def whole_log(path, budget, policy="coop"):
    """The arena's allocation log of one replay taken whole: [(offset, bytes)] allocated."""
    arena = coop.Arena(budget, 512)
    replayer = Replayer(load(path), arena, policy)
    arena.start_log()
    replayer.run()
    replayer.finish()
    log = arena.take_log()
    return [(log[k], log[k + 1]) for k in range(0, len(log), 2) if log[k + 1] >= 0]


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
    assert tl.marks == [[4, 0, 1, 0], [6, 1, 1, 0], [8, 1, 0, 0]]
    assert [p["t0"] for p in tl.pieces][:3] == [0.5, 1.5, 2.5]   # records 0, 1, 2: one event
    assert tl.pieces[1]["t1"] == 4.333333                         # record 4: 1st of 2 events


def test_a_failed_kernel_leaves_the_owners_of_later_pieces_as_they_were(tmp_path):
    """A failed call (docs/trace-format.md) runs no op: the pieces after it keep their own ops'
    names."""
    failed = {"op": "call", "name": "oops", "inputs": [1], "outputs": [], "cost": 0,
              "cls": "cheap", "failed": True}
    path = tmp_path / "failed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:3] + [failed] + RECORDS[3:]))
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
    assert tl.marks[-1] == [6, 2, 1, 0]


def test_the_page_is_self_contained(trace, tmp_path):
    timeline.write(trace, tmp_path / "t.html", budget=4 * K)
    text = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert not re.search(r"\b(src|href)\s*=", text)
    assert set(re.findall(r"https?://[^\s\"']+", text)) == {"http://www.w3.org/2000/svg"}
    data = page_data(tmp_path / "t.html")
    assert len(data["pieces"]) == len(PIECES) and data["capacity"] == 4 * K


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
                                                "moves")}
    assert delta["evictions"] > 0 and delta["recomputes"] > 0 and delta["moves"] > 0
    assert {k: data["figures"][k] for k in delta} == delta
    sums = np.array([m[1:] for m in data["counts"]]).sum(axis=0).tolist()
    assert sums == [delta["recomputes"], delta["evictions"] + delta["eager_evictions"],
                    delta["moves"]]
    col = data["columns"]
    moved = sum(p[col.index("begin")] == timeline.MARKS.index("moved") for p in data["pieces"])
    assert moved == delta["moves"]


def test_a_runtime_that_records_already_cannot_draw(tmp_path, rt):
    with rt.record(tmp_path / "t.jsonl"):
        with pytest.raises(ValueError, match="recording a trace already"):
            with rt.timeline(tmp_path / "t.html"):
                pass


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
