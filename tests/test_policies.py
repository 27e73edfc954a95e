"""coop.engine.policies: one frozen record per runtime policy."""
import dataclasses

import pytest

from coop._core import POLICIES as CORE_POLICIES
from coop.engine.policies import POLICIES, Policy, get_policy

#: name -> (core policy, partition, inplace, ideal, move): the runtime's table, spelled out
#: (DTR's baselines and coop-no-inplace mutate by DTR's rule: inplace off)
EXPECTED = {
    "coop": ("coop", True, True, False, True),
    "dtr": ("dtr", False, False, False, False),
    "dte": ("dte", False, False, False, False),
    "lru": ("lru", False, False, False, False),
    "size": ("size", False, True, False, False),
    "none": ("none", False, True, False, False),
    "coop-no-partition": ("coop", False, True, False, True),
    "coop-no-inplace": ("coop", True, False, False, True),
    "coop-loop": ("dtr", True, True, False, False),
    "dtr-ideal": ("dtr", False, False, True, False),
    "coop-no-move": ("coop", True, True, False, False),
    "coop-move-if-blocked": ("coop", True, True, False, True),
    "coop-per-byte": ("coop", True, True, False, True),
    "coop-offload": ("coop", True, True, False, True),
    "capuchin": ("dtr", False, False, False, False),
}


def test_the_table():
    assert list(POLICIES) == list(EXPECTED)
    for name, (core, partition, inplace, ideal, move) in EXPECTED.items():
        p = POLICIES[name]
        assert (p.name, p.core, p.partition, p.inplace, p.ideal, p.move) == (
            name, core, partition, inplace, ideal, move)
        assert get_policy(name) is p
        assert p.offload == (name in ("coop-offload", "capuchin"))
        assert p.offload_last == (name != "capuchin")
        assert p.moves_if_blocked == (name == "coop-move-if-blocked")
        assert p.excess_weight == (1.0 if name == "coop-per-byte" else 0.0)
        assert p.core_code == CORE_POLICIES.index(core)


def test_core_codes_are_the_cores():
    """core_code is PolicyCode of _core.pxd: P_COOP = 0 ... P_NONE = 5, in coop._core.POLICIES order."""
    assert CORE_POLICIES == ("coop", "dtr", "dte", "lru", "size", "none")
    assert {p.core: p.core_code for p in POLICIES.values()} == {
        "coop": 0, "dtr": 1, "dte": 2, "lru": 3, "size": 4, "none": 5}
    assert set(CORE_POLICIES) <= set(POLICIES)    # every core policy is a runtime policy too


def test_records_are_frozen():
    p = get_policy("coop")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.partition = False
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.core_code = 1
    assert p == Policy("coop", "coop", partition=True, inplace=True, move=True)
    assert hash(p) == hash(Policy("coop", "coop", True, True, False, True))
    assert get_policy("coop-no-move") == Policy("coop-no-move", "coop", True, True)


@pytest.mark.parametrize("name", ["fifo", "", "COOP", "dtr ", None, 3, 1.5, ["coop"], {"coop"},
                                  b"coop"])
def test_unknown_policies(name):
    with pytest.raises(ValueError, match=r"unknown policy .*; choose one of coop, dtr, dte, lru, "
                                         r"size, none, coop-no-partition, coop-no-inplace, "
                                         r"coop-loop, dtr-ideal, coop-no-move"):
        get_policy(name)


def test_a_record_needs_a_core_policy():
    with pytest.raises(ValueError, match="unknown core policy 'fifo'"):
        Policy("mine", "fifo", partition=False, inplace=True)
