"""coop's in-place rule against DTR's (coop-no-inplace), on the unrolled-GAN-like program
(coop.models.unrolled): in-place updates inside an unrolled loop whose activations an outer
backward reads. The engine's branches are counted exactly in tests/test_engine.py."""
import pytest

import coop.replay as R
from coop.models.unrolled import unrolled_gan_trace

RATIOS = [r / 100 for r in range(100, 29, -5)]


@pytest.fixture(scope="module")
def gan(tmp_path_factory):
    return R.load(unrolled_gan_trace(tmp_path_factory.mktemp("gan") / "gan.jsonl", unroll=4,
                                     layers=3, width=256, batch=64))


def test_the_program_mutates_inside_its_unrolled_loop(gan):
    names = [gan.names[t] for t in range(gan.n_ops)]
    assert names.count("mul_") == names.count("add_") - 1 == 4 * 3


def test_coop_is_never_worse_than_dtrs_rule_on_the_unrolled_gan(gan):
    peak = R.peak(gan)
    done = {}
    for policy in ("coop", "coop-no-inplace"):
        for ratio in RATIOS:
            result = R.replay(gan, budget=int(ratio * peak), policy=policy)
            if result["status"] == "ok":
                done[policy, ratio] = result["compute_overhead"]
    both = [r for r in RATIOS if ("coop", r) in done and ("coop-no-inplace", r) in done]
    assert len(both) >= 2 and any(done["coop-no-inplace", r] > 1.0 for r in both)
    for ratio in both:
        assert done["coop", ratio] <= done["coop-no-inplace", ratio], ratio
    assert min(r for p, r in done if p == "coop") <= min(r for p, r in done
                                                         if p == "coop-no-inplace")
