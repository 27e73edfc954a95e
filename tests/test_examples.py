"""examples/train_gpt.py and examples/train_cnn.py: each main() runs a short training at a budget
below the unlimited run's peak ("0.5x", "0.7x": a probe measures the peak first), the loss falls
(the CNN beats chance on the held-out digits), the runtime evicted and recomputed, the peak stayed
within the budget and the PNG was written."""
import math
import os

import numpy as np
import pytest
from _scripts import load_example


def check_run(run, png):
    stats = run["stats"]
    assert stats["recomputes"] > 0 and stats["evictions"] > 0
    assert stats["peak_used_bytes"] <= run["budget"] < run["peak_unlimited"]
    assert os.path.getsize(png) > 0


def test_train_gpt_learns_under_a_budget(tmp_path):
    example = load_example("train_gpt")
    run = example.main(["--budget", "0.55x", "--steps", "40", "--layers", "4", "--d-model", "32",
                        "--block", "32", "--batch", "8", "--lr", "1e-2", "--warmup", "5",
                        "--eval-batches", "2",
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


#: a tiny run of the GPT example (its budget options come first)
TINY = ["--steps", "1", "--probe-steps", "1", "--layers", "1", "--d-model", "16", "--block", "16",
        "--batch", "2", "--eval-batches", "1", "--log-every", "0", "--backend", "numpy",
        "--no-progress"]


def test_train_gpt_reads_a_share_of_the_peak_as_x_or_percent(tmp_path):
    example = load_example("train_gpt")
    runs = [example.main(["--budget", b, *TINY, "--out", str(tmp_path)]) for b in ("1.5x", "150%")]
    assert runs[0]["budget"] == runs[1]["budget"] == int(1.5 * runs[0]["peak_unlimited"])


@pytest.mark.parametrize("argv, message", [
    (["--budget", "abc"], "--budget: budget 'abc': not a budget"),
    (["--budget=-3GB"], "--budget: budget '-3GB': must be more than 0"),
    (["--budget", "0"], "--budget: budget '0': must be more than 0"),
    (["--budget", "1000TB"], "--budget: budget '1000TB': 1,000,000,000,000,000 bytes is more "
                             "than this host's memory"),
    (["--budget", "0.5"], "--budget: budget '0.5': a bare number is bytes here"),
    (["--probe-budget", "-1"], "--probe-budget: budget '-1': must be more than 0"),
    (["--steps", "0"], "--steps must be at least 1, got 0"),
])
@pytest.mark.parametrize("name", ["train_gpt", "train_cnn"])
def test_a_bad_argument_is_one_line_and_status_2(capsys, name, argv, message):
    example = load_example(name)
    with pytest.raises(SystemExit) as info:
        example.main([*argv, "--no-progress"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"examples/{name}.py: error: {message}"), err
    if "--budget:" in message:
        assert 'give 2000000000 (bytes), a size ("6GiB", "512MB", "1.5 GiB") or a share of ' \
               'the unlimited peak' in err


def test_backend_cupy_without_a_device_says_so(capsys):
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(SystemExit) as info:
        load_example("train_gpt").main(["--backend", "cupy", "--no-progress"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "examples/train_gpt.py: error: --backend cupy: there is no CUDA device here "
        "(cupy.cuda.is_available() is false); use --backend numpy\n")


def test_fragmentation_reads_a_bare_ratio_and_refuses_a_bad_budget(capsys):
    example = load_example("fragmentation")
    with pytest.raises(SystemExit) as info:
        example.main(["--budget", "abc"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "budget 'abc': not a budget" in err and '"0.5"' in err


def test_train_gpt_under_a_budget_is_bit_identical_to_an_unlimited_run(tmp_path):
    """The main job's claim: the budget changes where tensors live and what is recomputed,
    never a bit of the losses (schedule and clipping included: they run as coop ops)."""
    example = load_example("train_gpt")
    common = ["--steps", "8", "--layers", "4", "--d-model", "32", "--block", "32", "--batch", "8",
              "--warmup", "3", "--eval-batches", "2", "--log-every", "0", "--backend", "numpy",
              "--no-progress", "--out", str(tmp_path)]
    budgeted = example.main(["--budget", "0.55x", *common])
    unlimited = example.main(["--budget", "256MiB", *common])
    assert budgeted["stats"]["recomputes"] > 0 and unlimited["stats"]["recomputes"] == 0
    assert budgeted["losses"] == unlimited["losses"]
    assert budgeted["val_loss"] == unlimited["val_loss"]


def test_train_gpt_updates_inside_the_backward_pass_bit_identically(tmp_path):
    """--update-in-backward (coop.optim's backward_step) trains the same bits as the update
    after the backward pass, under a budget too (the schedule runs as before; clipping is off
    for both: it needs every gradient first)."""
    example = load_example("train_gpt")
    common = ["--steps", "6", "--layers", "2", "--d-model", "32", "--block", "32", "--batch", "8",
              "--warmup", "2", "--clip", "0", "--eval-batches", "2", "--log-every", "0",
              "--backend", "numpy", "--no-progress", "--out", str(tmp_path)]
    after = example.main(["--budget", "256MiB", *common])
    inside = example.main(["--budget", "0.7x", "--update-in-backward", *common])
    assert inside["stats"]["recomputes"] > 0
    assert inside["losses"] == after["losses"] and inside["val_loss"] == after["val_loss"]


def test_update_in_backward_refuses_clipping_with_the_fix(capsys):
    example = load_example("train_gpt")
    with pytest.raises(SystemExit) as info:
        example.main(["--update-in-backward", "--no-progress"])      # the GPT clips by default
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "examples/train_gpt.py: error: --update-in-backward updates each parameter as soon as "
        "its own gradient is complete, so it cannot clip the global gradient norm first (pass "
        "--clip 0)"), err
