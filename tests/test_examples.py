"""examples/train_gpt.py and examples/train_cnn.py: each main() runs a short training at a budget
below the unlimited run's peak ("0.5x", "0.7x": a probe measures the peak first), the loss falls
(the CNN beats chance on the held-out digits), the runtime evicted and recomputed, the peak stayed
within the budget and the PNG was written."""
import importlib.util
import math
import os

import numpy as np
import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_run(run, png):
    stats = run["stats"]
    assert stats["recomputes"] > 0 and stats["evictions"] > 0
    assert stats["peak_used_bytes"] <= run["budget"] < run["peak_unlimited"]
    assert os.path.getsize(png) > 0


def test_train_gpt_learns_under_a_budget(tmp_path):
    example = load_example("train_gpt")
    run = example.main(["--budget", "0.55x", "--steps", "40", "--layers", "4", "--d-model", "32",
                        "--block", "32", "--batch", "8", "--lr", "1e-2", "--eval-batches", "2",
                        "--log-every", "20", "--backend", "numpy", "--no-progress",
                        "--out", str(tmp_path)])
    check_run(run, tmp_path / "train_gpt.png")
    losses = run["losses"]
    assert abs(losses[0] - math.log(96)) < 0.3 or losses[0] > 3.5     # ~ln(vocab) at the start
    assert np.mean(losses[-5:]) < losses[0] - 1.0, losses
    assert run["val_loss"] < losses[0] - 1.0


def test_train_cnn_beats_chance_under_a_budget(tmp_path):
    pytest.importorskip("sklearn")
    example = load_example("train_cnn")
    run = example.main(["--budget", "0.7x", "--steps", "60", "--layers", "8",
                        "--batch", "32", "--log-every", "0", "--backend", "numpy",
                        "--no-progress", "--out", str(tmp_path)])
    check_run(run, tmp_path / "train_cnn.png")
    assert np.mean(run["losses"][-5:]) < run["losses"][0], run["losses"]
    assert run["accuracy"] > 0.25         # chance is 0.1 (0.35 seen at 60 steps)
