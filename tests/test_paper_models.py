"""coop.models.paper: the Coop paper's nine models have their published (or formula) parameter
counts, and each runs one training step (forward, loss, backward, SGD with momentum) on the
simulation backend with the a100-80gb cost model; one at its paper batch size peaks within
bounds worked out from its layers."""
import json

import pytest

import coop
import coop.trace.replay as R
from coop.models import paper


def sim_runtime():
    return coop.Runtime(coop.SimBackend("1000GiB"), policy="coop", cost="a100-80gb")


def bert_mlm_count(layers=24, d=1024, ff=4096, vocab=30522, positions=512, types=2):
    """BertForMaskedLM: embeddings (+ LayerNorm), encoder layers, masked-LM head (dense,
    LayerNorm, decoder bias; the decoder weight is the word embeddings)."""
    embeddings = (vocab + positions + types) * d + 2 * d
    layer = 4 * (d * d + d) + (d * ff + ff) + (ff * d + d) + 2 * 2 * d
    return embeddings + layers * layer + (d * d + d) + 2 * d + vocab


def test_unet_count_formula():
    assert unet_count() == 31_037_698


def test_bert_mlm_count_against_the_published_count():
    d, vocab = 1024, 30522
    pooler, head = d * d + d, (d * d + d) + 2 * d + vocab
    assert bert_mlm_count() - head + pooler == 335_141_888   # bert-large-uncased, with pooler


def unet_count(n_channels=3, n_classes=2, widths=(64, 128, 256, 512, 1024)):
    """milesial's U-Net, bilinear=False: DoubleConv(a, b) is two bias-free 3x3 convolutions
    and two BatchNorms; each up is a 2x2 transposed convolution (with bias) halving the
    channels, then DoubleConv of the concatenation; a 1x1 output convolution with bias."""
    def double(a, b):
        return 9 * a * b + 9 * b * b + 2 * 2 * b
    ins = (n_channels,) + widths[:-1]
    downs = sum(double(a, b) for a, b in zip(ins, widths))
    ups = sum(4 * c * (c // 2) + c // 2 + double(c, c // 2) for c in widths[:0:-1])
    return downs + ups + widths[0] * n_classes + n_classes


COUNTS = {
    "resnet50": 25_557_032,      # torchvision
    "resnet152": 60_192_808,     # torchvision
    "inception_v3": 27_161_264,  # torchvision, aux_logits=True (AuxLogits counted)
    "unet": unet_count(),        # 31,037,698
    "bert_large": bert_mlm_count(),
    "swin_t": 28_288_354,        # torchvision
    "bilstm": 2 * (100 * 1024 + 256 * 1024 + 1024) + 512 * 2 + 2,   # D 100, H 256, 2 classes
    "densenet121": 7_978_856,    # torchvision
    "gpt2": 124_439_808,         # GPT-2 small, LM head tied
}


@pytest.mark.parametrize("name", list(COUNTS))
def test_parameter_counts(name):
    assert paper.num_parameters(name) == COUNTS[name]


def test_the_paper_set_is_complete():
    assert list(paper.PAPER_MODELS) == ["resnet50", "resnet152", "inception_v3", "unet",
                                        "bert_large", "swin_t", "bilstm", "densenet121", "gpt2"]
    assert list(COUNTS) == list(paper.PAPER_MODELS)


@pytest.mark.parametrize("name", list(paper.PAPER_MODELS))
def test_one_training_step_at_a_small_batch(name):
    rt = sim_runtime()
    stats = paper.training_step(rt, name, batch=2)
    assert stats["compute_overhead"] == 1.0 and stats["recomputes"] == 0
    assert stats["cost_total"] > 0


def resnet50_conv_outputs(size=224):
    """Elements of every convolution's output, per image, in ResNet-50 (v1.5 bottlenecks)."""
    s = size // 2
    total, s_in = 64 * s * s, s // 2
    for i, n in enumerate((3, 4, 6, 3)):
        width, s_out = 64 << i, s_in // (2 if i else 1)
        for j in range(n):
            total += width * s_in * s_in + width * s_out * s_out + 4 * width * s_out * s_out
            if j == 0:
                total += 4 * width * s_out * s_out    # the projection shortcut
            s_in = s_out
    return total


def test_resnet50_peak_at_the_paper_batch():
    # ResNet-50 is the fastest of the nine at its paper batch (115). Lower bound: every
    # convolution's output is saved for its BatchNorm's backward, and the weights, gradients
    # and momentum buffers are live at the step (3 x 4 bytes per parameter). Upper bound:
    # each convolution output may also have its BatchNorm and ReLU outputs alive (3x).
    rt = sim_runtime()
    batch = paper.PAPER_MODELS["resnet50"].batch
    paper.training_step(rt, "resnet50")
    peak = rt.arena.stats()["peak_used_bytes"]
    activations = 4 * batch * resnet50_conv_outputs()
    state = 3 * 4 * COUNTS["resnet50"]
    assert activations + state <= peak <= 3 * activations + state


def _aligned(n, alignment=512):
    return -(-n // alignment) * alignment


def _constant_bytes(path):
    """The bytes of a trace's constant records (what the step starts with), aligned."""
    with open(path) as f:
        records = [json.loads(line) for line in f]
    return sum(_aligned(r["size"]) for r in records if r["op"] == "constant")


def test_adamw_holds_a_second_state_tensor_per_parameter(tmp_path):
    """SGD here has momentum: one state tensor per parameter (the buffer); AdamW has two (the
    moments m and v), made before the step like the parameters, so they are constants held for
    the whole program. AdamW's trace thus starts with exactly the parameters' bytes (each
    tensor aligned) more constants: 2x the parameter bytes of state against SGD's 1x. Held
    from start to end, the extra state adds those bytes to the unlimited peak and to the
    lower bound (every live constant), exactly. The offload floor is the largest op's working
    set: the state's only readers are the updates, and AdamW's update of a tensor reads three
    of its size (p, m, v) as SGD's momentum update does (buffer, gradient, p), so on the BiLSTM
    (whose largest op is not an update) the floor does not change."""
    rt = coop.Runtime(coop.SimBackend("1TiB"))
    params = paper.PAPER_MODELS["bilstm"].build(rt).parameters()
    param_bytes = sum(_aligned(p.size * p.dtype.itemsize) for p in params)
    assert param_bytes == 2_929_152     # 732,162 fp32 parameters in 8 tensors, each aligned
    runs = {}
    for optimizer in ("sgd", "adamw"):
        path = tmp_path / f"{optimizer}.jsonl"
        paper.record_trace("bilstm", path, batch=2, optimizer=optimizer)
        runs[optimizer] = (_constant_bytes(path), R.unlimited(path))
    (sgd_constants, sgd), (adamw_constants, adamw) = runs["sgd"], runs["adamw"]
    assert adamw_constants == sgd_constants + param_bytes
    assert adamw["peak_used_bytes"] - sgd["peak_used_bytes"] == param_bytes
    assert adamw["lower_bound_bytes"] - sgd["lower_bound_bytes"] == param_bytes
    assert adamw["offload_floor_bytes"] == sgd["offload_floor_bytes"]
    assert adamw["status"] == sgd["status"] == "ok"
    assert (adamw["compute_overhead"], adamw["recomputes"]) == (1.0, 0)


def test_an_unknown_optimizer_is_refused_by_name():
    with pytest.raises(ValueError, match=r"optimizer must be one of \['adamw', "
                                         r"'adamw-in-backward', 'sgd', 'sgd-in-backward'\], "
                                         r"got 'adam'"):
        paper.training_step(coop.Runtime(coop.SimBackend("1TiB")), "bilstm", batch=2,
                            optimizer="adam")


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_updates_in_backward_run_the_same_updates_inside_the_pass(tmp_path, optimizer):
    """With -in-backward the step runs the same update kernels (the same count of each, the
    same constants before the start) but each parameter's inside the backward pass, as soon as
    its gradient is complete: the first update comes before the last backward op, and the
    gradients are never all held, so the unlimited peak and the lower bound are no higher."""
    runs = {}
    for name in (optimizer, f"{optimizer}-in-backward"):
        path = tmp_path / f"{name}.jsonl"
        paper.record_trace("gpt2", path, batch=1, optimizer=name)
        with open(path) as f:
            records = [json.loads(line) for line in f]
        updates = [i for i, r in enumerate(records) if r["op"] == "mutate"]
        backwards = [i for i, r in enumerate(records)
                     if r["op"] == "call" and r["name"].endswith("_backward")]
        names = sorted(records[i]["name"] for i in updates)
        runs[name] = (names, updates[0], backwards[-1], _constant_bytes(path), R.unlimited(path))
    names, first, last, constants, stats = runs[optimizer]
    names_ib, first_ib, last_ib, constants_ib, stats_ib = runs[f"{optimizer}-in-backward"]
    assert names_ib == names and constants_ib == constants
    assert first > last and first_ib < last_ib
    assert stats_ib["status"] == "ok"
    assert stats_ib["peak_used_bytes"] <= stats["peak_used_bytes"]
    assert stats_ib["lower_bound_bytes"] < stats["lower_bound_bytes"]
