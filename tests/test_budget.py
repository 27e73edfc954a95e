"""Budgets: ints, sizes with units, percentages of a total; everything else is refused by name."""
import os

import numpy as np
import pytest

from coop.budget import host_memory_bytes, parse_budget


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
])
def test_percentages(value, total, expected):
    assert parse_budget(value, total=total) == expected


@pytest.mark.parametrize("value", [
    "", "GB", "12", "12 XB", "-5GB", "nan", "nan GB", "inf GiB", "1e9 B", "0B", "0 GiB",
    "0.4 B", "1,5 GB", "5 G B", 0, -1,
])
def test_bad_values_name_themselves(value):
    with pytest.raises(ValueError, match="budget .*e.g.") as info:
        parse_budget(value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", [True, False, 1.5, 1e9, float("nan"), None, [1], b"1GB"])
def test_bad_types(value):
    with pytest.raises(TypeError, match="integer number of bytes") as info:
        parse_budget(value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value, total, message", [
    ("80%", None, "needs the total"),
    ("0%", 1000, r"in \(0, 100\]"),
    ("100.5%", 1000, r"in \(0, 100\]"),
    ("150%", 1000, r"in \(0, 100\]"),
    ("-5%", 1000, "not a size"),
    ("1%", 10, "less than 1 byte"),
    ("50%", 0, "must be an int > 0"),
    ("50%", True, "must be an int > 0"),
    ("50%", 10.0, "must be an int > 0"),
])
def test_bad_percentages(value, total, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_budget(value, total=total)
    assert repr(value) in str(info.value) and "e.g." in str(info.value)


def test_host_memory_is_the_physical_memory():
    assert host_memory_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert host_memory_bytes() > 0
    assert parse_budget("50%", total=host_memory_bytes()) == host_memory_bytes() // 2
