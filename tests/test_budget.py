"""Budgets: ints, sizes with units, shares of a total ("0.5x", "50%", a bare ratio where the
entry point is ratio-based); everything else is refused in one line naming the value and the
forms accepted, and every form an error lists is accepted."""
import os
import re

import numpy as np
import pytest

import coop

from coop.budget import ARENA_LIMIT, Budget, host_memory_bytes, parse_budget


@pytest.mark.parametrize("value, expected", [
    (1, 1),
    (4096, 4096),
    (np.int64(512), 512),
    ("1B", 1),
    ("512MB", 512_000_000),
    ("512 mb", 512_000_000),
    ("6GiB", 6 * 1024**3),
    ("6gib", 6 * 1024**3),
    ("1.5 GiB", 1536 * 1024**2),
    ("0.3 KB", 300),
    (".5KiB", 512),
    ("2TB", 2 * 1000**4),
    ("1 TiB", 1024**4),
    ("3 kib", 3072),
    ("  7 GB  ", 7_000_000_000),
    ("1.0000001 KB", 1000),            # fractions of a byte round down
])
def test_sizes(value, expected):
    assert parse_budget(value) == expected


@pytest.mark.parametrize("value, total, expected", [
    ("80%", 1000, 800),
    ("100%", 1000, 1000),
    ("12.5 %", 8 * 1024**3, 1024**3),
    ("0.1%", 1000, 1),
    ("33%", 10, 3),
    ("150%", 1000, 1500),
    ("0.5x", 1000, 500),
    ("0.5 X", 1000, 500),
    ("1.5x", 1000, 1500),
    (".25x", 1000, 250),
])
def test_shares(value, total, expected):
    assert parse_budget(value, total=total) == expected


@pytest.mark.parametrize("value, expected", [("0.5", 500), ("1", 1000), ("50%", 500),
                                             ("0.5x", 500), ("6KiB", 6144), ("2000B", 2000)])
def test_a_ratio_based_entry_point_reads_a_bare_number_as_a_ratio(value, expected):
    assert Budget(value, of="the peak", bare="ratio").resolve(1000) == expected


#: (value, what the message says): each a one-line ValueError naming the value
BAD = [
    ("abc", "not a budget"), ("", "not a budget"), ("GB", "not a budget"),
    ("-3GB", "must be more than 0"), ("-5%", "must be more than 0"),
    ("-0.5x", "must be more than 0"), ("0", "must be more than 0"),
    ("0B", "must be more than 0"), ("0 GiB", "must be more than 0"), ("0%", "must be more than 0"),
    (0, "must be more than 0"), (-1, "must be more than 0"),
    ("1000TB", "more than this host's memory"), (10**30, "more than this host's memory"),
    ("12 XB", "unknown unit 'XB'"), ("5 G B", "not a budget"), ("1,5 GB", "not a budget"),
    ("nan", "not a budget"), ("nan GB", "not a budget"), ("inf GiB", "not a budget"),
    ("1e9 B", "not a budget"), ("0.4 B", "less than 1 byte"),
    ("0.5", "a bare number is bytes here"), ("1%", "less than 1 byte"),
]


@pytest.mark.parametrize("value, message", BAD)
def test_a_bad_budget_names_itself_and_lists_the_forms(value, message):
    with pytest.raises(ValueError) as info:
        parse_budget(value, total=50, of="this host's memory", limit=10**12,
                     limit_name="this host's memory")
    text = str(info.value)
    assert message in text and repr(value)[:80] in text and "\n" not in text
    assert text.endswith('give 2000000000 (bytes), a size ("6GiB", "512MB", "1.5 GiB") or a '
                         'share of this host\'s memory ("0.5x", "50%")')


def test_every_form_an_error_lists_is_accepted():
    """The examples quoted in each entry point's error messages parse."""
    for bare, forms in (("bytes", ["2000000000", "6GiB", "512MB", "1.5 GiB", "0.5x", "50%"]),
                        ("ratio", ["6GiB", "512MB", "2000000000B", "0.5", "0.5x", "50%"])):
        with pytest.raises(ValueError) as info:
            Budget("abc", of="the peak", bare=bare)
        listed = re.findall(r'"([^"]+)"', str(info.value)) + re.findall(r"\b(\d+) \(bytes\)",
                                                                        str(info.value))
        assert sorted(listed) == sorted(forms)
        for form in listed:
            assert Budget(form, of="the peak", bare=bare).resolve(10**10) > 0, form


@pytest.mark.parametrize("value", ["0.5x", "50%"])
def test_a_share_without_a_total_is_refused(value):
    with pytest.raises(ValueError, match=f"budget '{re.escape(value)}': a share needs a total"):
        parse_budget(value)


@pytest.mark.parametrize("value", [True, False, 1.5, 1e9, float("nan"), None, [1], b"1GB"])
def test_bad_types(value):
    with pytest.raises(TypeError, match="neither an int nor a string") as info:
        parse_budget(value)
    assert repr(value) in str(info.value)


def test_a_budget_above_what_an_arena_holds_is_refused():
    with pytest.raises(ValueError, match="more than an arena holds"):
        parse_budget(ARENA_LIMIT + 1)
    assert parse_budget(ARENA_LIMIT) == ARENA_LIMIT


def test_a_byte_count_read_as_a_share_says_how_to_write_bytes():
    """Where a bare number is a share (coop replay), a byte count without its unit is a share
    too large for any arena: the error says how it was read and how to write bytes."""
    budget = Budget("2746258944", of="the peak", bare="ratio")
    with pytest.raises(ValueError) as info:
        budget.resolve(10_171_330_560)
    assert str(info.value).startswith(
        "budget '2746258944': a bare number is a share of the peak here (10,171,330,560 bytes), "
        "so 27,933,107,522,780,528,640 bytes is more than an arena holds "
        f"({ARENA_LIMIT:,} bytes); for bytes write '2746258944B'; give a size")
    assert Budget("2746258944B", of="the peak", bare="ratio").resolve(10) == 2746258944
    with pytest.raises(ValueError) as info:            # a share with its unit: as before
        Budget("1000000000000x", of="the peak", bare="ratio").resolve(10_171_330_560)
    assert str(info.value).startswith("budget '1000000000000x': 10,171,330,560,000,000,000,000 "
                                      "bytes is more than an arena holds")


def test_host_memory_is_the_physical_memory():
    assert host_memory_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert host_memory_bytes() > 0
    assert parse_budget("50%", total=host_memory_bytes()) == host_memory_bytes() // 2


@pytest.mark.parametrize("value, message", [
    (10**30, "more than this host's memory"), ("1000TB", "more than this host's memory"),
    ("abc", "not a budget"), ("-3GB", "must be more than 0"), (0, "must be more than 0"),
    ("150%", "more than this host's memory"),
])
def test_numpy_allocator_refuses_a_bad_budget_by_name(value, message):
    with pytest.raises(ValueError, match=message) as info:
        coop.numpy_allocator(value)
    assert "share of this host's memory" in str(info.value)


def test_numpy_allocator_takes_a_share_of_the_host():
    assert coop.numpy_allocator("0.001x").arena.capacity == \
        coop.numpy_allocator("0.1%").arena.capacity
