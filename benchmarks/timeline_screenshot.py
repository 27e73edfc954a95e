"""The README's timeline picture: two AdamW steps of a small GPT at 0.8 of its peak under coop,
drawn by `coop replay --timeline`'s page in headless Chromium, hovering a recomputed softmax.

The GPT (`coop.models.GPT(rt, 32, 16, 2, 2, 16)`, batch 4 x 16) is recorded on the host with
modelled costs (`cost="cpu"`), so the trace and the picture are the same on every run. Needs
selenium, Chromium and chromedriver (as tests/test_timeline.py).

Run (after `pip install ".[test]"`): python benchmarks/timeline_screenshot.py [--out docs/img/timeline.png]
"""
import argparse
import os
import shutil
import tempfile

import numpy as np

import coop
from coop import models, optim
from coop.trace import replay as R
from coop.trace import timeline


def record(path, steps=2, batch=4, block=16):
    """Trace `steps` AdamW steps of the small GPT into path."""
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="cpu")
    model = models.GPT(rt, 32, block, 2, 2, 16, rng=0)
    opt = optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    with rt.record(path):
        for _ in range(steps):
            x = rng.integers(0, 32, (batch, block))
            loss = model.loss(x, np.roll(x, -1, axis=1))
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad()


def screenshot(page, out, size=(1180, 800)):
    """Open page in headless Chromium, hover a recomputed softmax piece and save a PNG."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={size[0]},{size[1]}"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        browser.get(f"file://{os.path.abspath(page)}")
        pieces = browser.find_elements(By.CSS_SELECTOR, '#view rect.piece[data-begin="recomputed"]')
        softmax = [p for p in pieces if "softmax" in (p.get_attribute("data-op") or "")]
        target = (softmax or pieces)[0]
        ActionChains(browser).move_to_element(target).perform()
        browser.save_screenshot(out)
    finally:
        browser.quit()
    return target


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/img/timeline.png")
    p.add_argument("--ratio", type=float, default=0.8)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trace, page = os.path.join(tmp, "gpt.jsonl"), os.path.join(tmp, "gpt.html")
        record(trace)
        program = R.load(trace)
        drawn = timeline.write(program, page, ratio=args.ratio, policy="coop")
        print(f"{drawn.title}; figures {drawn.figures}")
        screenshot(page, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
