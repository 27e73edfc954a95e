"""Memory budgets: bytes from an int, a size with a unit ("6GiB", "512 MB") or a percentage."""
import os
import re
from decimal import Decimal
from operator import index

__all__ = ["host_memory_bytes", "parse_budget"]

UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*", re.IGNORECASE)
_PERCENT = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*")
_EXAMPLES = "e.g. 2_000_000_000, \"6GiB\", \"512MB\", \"1.5 GiB\" or \"80%\""


def host_memory_bytes():
    """Physical memory of this machine in bytes (the total for "80%" budgets on the host)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_budget(value, total=None):
    """Bytes of a budget: an int > 0, "<number><unit>" (B, KB..TB, KiB..TiB) or "<p>%" of total.

    Sizes with a fraction round down to whole bytes; a result of 0 bytes is an error.
    """
    if isinstance(value, str):
        return _parse_text(value, total)
    if isinstance(value, (bool, float)) or not hasattr(value, "__index__"):
        raise TypeError(f"budget {value!r}: give an integer number of bytes or a string, "
                        f"{_EXAMPLES}")
    nbytes = index(value)
    if nbytes <= 0:
        raise ValueError(f"budget {value!r}: must be more than 0 bytes, {_EXAMPLES}")
    return nbytes


def _parse_text(text, total):
    match = _PERCENT.fullmatch(text)
    if match:
        return _percent(text, Decimal(match.group(1)), total)
    match = _SIZE.fullmatch(text)
    if match is None or match.group(2).lower() not in UNITS:
        raise ValueError(f"budget {text!r}: not a size with a unit (B, KB, MB, GB, TB, KiB, MiB, "
                         f"GiB, TiB) or a percentage, {_EXAMPLES}")
    nbytes = int(Decimal(match.group(1)) * UNITS[match.group(2).lower()])
    if nbytes <= 0:
        raise ValueError(f"budget {text!r}: must be at least 1 byte, {_EXAMPLES}")
    return nbytes


def _percent(text, percent, total):
    if total is None:
        raise ValueError(f"budget {text!r}: a percentage needs the total memory it is a share of; "
                         f"give a size instead, {_EXAMPLES}")
    if isinstance(total, (bool, float)) or not hasattr(total, "__index__") or index(total) <= 0:
        raise ValueError(f"budget {text!r}: the total memory must be an int > 0, got {total!r}; "
                         f"or give a size, {_EXAMPLES}")
    if not 0 < percent <= 100:
        raise ValueError(f"budget {text!r}: a percentage must be in (0, 100], {_EXAMPLES}")
    nbytes = int(index(total) * percent / 100)
    if nbytes <= 0:
        raise ValueError(f"budget {text!r}: {percent}% of {total} bytes is less than 1 byte, "
                         f"{_EXAMPLES}")
    return nbytes
