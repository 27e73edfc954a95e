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


def test_fragmentation_exits_3_when_a_policy_runs_out_of_memory(tmp_path, capsys):
    # as coop replay: a comparison where a policy did not complete says so in its status
    example = load_example("fragmentation")
    common = ["--out", str(tmp_path), "--bins", "8"]
    assert example.main(["--budget", "0.5", *common]) == 0
    assert example.main(["--budget", "0.2", *common]) == 3
    out = capsys.readouterr().out
    assert "dtr ran out of memory" in out and "OOM at step 414/1336" in out
    assert not any(line.startswith("coop ran out of memory") for line in out.splitlines())


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


def one_line_error(capsys, run, argv):
    """run(argv) must stop with status 2 and one line on stderr; returns that line."""
    with pytest.raises(SystemExit) as info:
        run(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("probe_budget, problem", [
    ("130KiB", "it had to evict (6 evictions, 0 offloads), so its peak is not the unlimited one"),
    ("120KiB", "it failed (OutOfMemoryError)"),
])
def test_a_probe_budget_below_the_unlimited_peak_is_refused(capsys, tmp_path, probe_budget,
                                                             problem):
    """The probe measures the unlimited peak (0.14 MiB here): one that had to evict measured its
    own cap instead, so the share would be of the wrong peak."""
    example = load_example("train_gpt")
    err = one_line_error(capsys, example.main,
                         ["--probe-budget", probe_budget, *TINY, "--out", str(tmp_path)])
    assert err == (f"examples/train_gpt.py: error: --probe-budget {probe_budget} cannot hold the "
                   f"unlimited probe (1 steps of policy coop): {problem}; raise "
                   f"--probe-budget\n")


@pytest.mark.parametrize("name, argv, message", [
    ("train_gpt", ["--eval-batches", "0"], "--eval-batches must be at least 1, got 0"),
    ("train_gpt", ["--val-fraction", "0"],
     "--val-fraction must be between 0 and 1, both excluded, got 0"),
    ("train_gpt", ["--val-fraction", "1.5"],
     "--val-fraction must be between 0 and 1, both excluded, got 1.5"),
    ("train_gpt", ["--val-fraction", "0.99999"],
     "--val-fraction 0.99999 leaves 7 training characters, fewer than --block 64 + 2; lower "
     "--val-fraction or lower --block"),
    ("train_gpt", ["--cost", "foo"], "argument --cost: invalid choice: 'foo'"),
    ("train_gpt", ["--distributed", "--bucket-bytes", "abc"],
     "--bucket-bytes: budget 'abc': not a budget"),
    ("train_gpt", ["--bucket-bytes", "0"], "--bucket-bytes: budget '0': must be more than 0"),
    ("train_gpt", ["--bucket-bytes=-5"], "--bucket-bytes: budget '-5': must be more than 0"),
    ("train_gpt", ["--batch", "0"], "--batch must be at least 1, got 0"),
    ("train_gpt", ["--batch=-1"], "--batch must be at least 1, got -1"),
    ("train_gpt", ["--block", "0"], "--block must be at least 1, got 0"),
    ("train_gpt", ["--heads", "0"], "--heads must be at least 1, got 0"),
    ("train_gpt", ["--heads", "3"],
     "--d-model 64 is not a multiple of --heads 3; give a --d-model that --heads divides"),
    ("train_gpt", ["--d-model", "0"], "--d-model must be at least 1, got 0"),
    ("train_gpt", ["--dropout", "1.5"], "--dropout must be at least 0 and below 1, got 1.5"),
    ("train_gpt", ["--warmup=-5"], "--warmup must be at least 0, got -5"),
    ("train_gpt", ["--clip=-1"], "--clip must be at least 0, got -1"),
    ("train_gpt", ["--lr=-1"], "--lr must be more than 0, got -1"),
    ("train_gpt", ["--lr", "nan"], "--lr must be a number more than 0, got 'nan'"),
    ("train_gpt", ["--seed=-1"], "--seed must be at least 0, got -1"),
    ("train_gpt", ["--steps", "abc"], "--steps must be a whole number at least 1, got 'abc'"),
    ("train_gpt", ["--budget", "10"], "--budget 10: an arena of 10 bytes holds no 64-byte "
                                      "aligned piece; give a budget of at least 64 bytes"),
    ("train_gpt", ["--bogus"], "unrecognized arguments: --bogus (see examples/train_gpt.py "
                               "--help)"),
    ("train_cnn", ["--test-fraction", "0"],
     "--test-fraction must be between 0 and 1, both excluded, got 0"),
    ("train_cnn", ["--test-fraction=-0.5"],
     "--test-fraction must be between 0 and 1, both excluded, got -0.5"),
    ("train_cnn", ["--test-fraction", "1.5"],
     "--test-fraction must be between 0 and 1, both excluded, got 1.5"),
    ("train_cnn", ["--layers=-1"], "--layers must be comma-separated whole numbers, each at "
                                   "least 1 (\"8\", \"2,2\"), got '-1'"),
    ("train_cnn", ["--layers", "0"], "--layers must be comma-separated whole numbers"),
    ("train_cnn", ["--layers", "abc"], "--layers must be comma-separated whole numbers"),
    ("train_cnn", ["--layers", "1,,2"], "--layers must be comma-separated whole numbers"),
    ("train_cnn", ["--width", "0"], "--width must be at least 1, got 0"),
    ("train_cnn", ["--batch", "0"], "--batch must be at least 1, got 0"),
    ("train_cnn", ["--weight-decay=-1"], "--weight-decay must be at least 0, got -1"),
    ("fragmentation", ["--layers=-2"], "--layers must be at least 1, got -2"),
    ("fragmentation", ["--iterations", "0"], "--iterations must be at least 1, got 0"),
    ("fragmentation", ["--unit-mib", "0"], "--unit-mib must be more than 0, got 0"),
    ("fragmentation", ["--unit-mib=-1"], "--unit-mib must be more than 0, got -1"),
    ("fragmentation", ["--matmul-density=-5"], "--matmul-density must be more than 0, got -5"),
    ("fragmentation", ["--bins", "0"], "--bins must be at least 1, got 0"),
    ("fragmentation", ["--bins=-5"], "--bins must be at least 1, got -5"),
    ("fragmentation", ["--budget", "10B"], "--budget 10B: an arena of 10 bytes holds no "
                                           "64-byte aligned piece; give a budget of at least 64 "
                                           "bytes"),
])
def test_a_bad_value_is_refused_before_any_work(capsys, tmp_path, name, argv, message):
    if name == "train_cnn":
        pytest.importorskip("sklearn")
    example = load_example(name)
    extra = [] if name == "fragmentation" else ["--no-progress"]
    err = one_line_error(capsys, example.main, [*argv, *extra, "--out", str(tmp_path / "out")])
    assert err.startswith(f"examples/{name}.py: error: {message}"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["train_gpt", "train_cnn", "fragmentation"])
def test_an_out_that_is_a_file_is_refused_before_any_work(capsys, tmp_path, name):
    if name == "train_cnn":
        pytest.importorskip("sklearn")
    (tmp_path / "file").write_text("")
    example = load_example(name)
    for out, problem in ((tmp_path / "file", "is a file, not a directory; give a directory"),
                         (tmp_path / "file" / "sub", f"{tmp_path / 'file'} is a file, so the "
                                                     "directory cannot be made; give another "
                                                     "directory")):
        err = one_line_error(capsys, example.main, ["--out", str(out)])
        assert err == f"examples/{name}.py: error: --out {out}: {problem}\n"


def test_fragmentation_reports_a_policy_that_fails_at_its_first_op(capsys, tmp_path):
    example = load_example("fragmentation")
    example.main(["--budget", "100B", "--layers", "2", "--iterations", "1",
                  "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "dtr ran out of memory" in out and "coop ran out of memory" in out
    assert "OOM at step 0/" in out
    assert out.endswith("memory maps: none (every policy ran out of memory at its first op)\n")


def test_the_gpt_corpus_reads_every_listed_module_from_the_standard_library():
    """By path, not through the import system (which holds some modules frozen): every
    interpreter reads the same files, and none listed is skipped."""
    example = load_example("train_gpt")
    text, used = example.build_corpus()
    assert used == example.CORPUS_MODULES and len(used) == 90
    assert example.hashlib.sha256(text.encode()).hexdigest()[:12] == "af4950b29a19"


def test_the_final_loss_says_how_many_steps_it_averages(capsys, tmp_path):
    example = load_example("train_gpt")
    example.main(["--budget", "256MiB", *TINY, "--steps", "3", "--out", str(tmp_path)])
    assert "final train loss (mean of last 3)" in capsys.readouterr().out


@pytest.mark.parametrize("name, shown", [
    ("train_gpt", ["--seed SEED (default: 0)", "--layers LAYERS (default: 4)",
                   "--batch BATCH (default: 16)", "--weight-decay WEIGHT_DECAY (default: 0.01)"]),
    ("train_cnn", ["--seed SEED (default: 0)", "--width WIDTH (default: 8)",
                   "--batch BATCH (default: 32)", "--lr LR (default: 0.05)"]),
    ("fragmentation", ["--seed SEED (default: 0)", "--layers LAYERS (default: 16)",
                       "--iterations ITERATIONS (default: 3)",
                       "--unit-mib UNIT_MIB largest activation size A (default: 8.0)"]),
])
def test_help_shows_the_default_of_options_without_help_text(capsys, name, shown):
    with pytest.raises(SystemExit) as info:
        load_example(name).main(["--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in shown:
        assert option in text, text
