"""Memory budgets, written one way at every entry point.

A budget is bytes (an int, or a whole number as text), a size with a unit ("6GiB", "512 MB",
"1.5GiB"), or a share of a total that the entry point names: "0.5x" and "50%" mean the same
thing, half of the unlimited run's peak in ``coop replay`` and the examples, half of the host's
memory in ``coop.numpy_allocator``, half of the device's free memory in ``coop.allocator``.
Where budgets are ratios by default (``coop replay``), a bare number is a ratio too ("0.5").
"""
import os
import re
from decimal import Decimal
from operator import index

__all__ = ["ARENA_LIMIT", "Budget", "EmptyBudget", "host_memory_bytes", "parse_budget"]

UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
#: the most bytes an arena holds: no budget may be larger
ARENA_LIMIT = 1 << 62
_NUMBER = r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))"
_FORM = re.compile(_NUMBER + r"\s*([a-z]*|%)", re.IGNORECASE)


def host_memory_bytes():
    """Physical memory of this machine in bytes (the total of "50%" budgets on the host)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class EmptyBudget(ValueError):
    """A well-formed share that is less than one byte of the total it is a share of (the total,
    not the value, is the problem: a replayed trace whose unlimited peak is tiny)."""


class Budget:
    """A budget as written: ``nbytes`` (a size), or ``share`` (a Decimal) of a total that is
    known later (the unlimited peak, the memory). ``of`` names that total; None: no shares.
    ``bare`` says what a bare number is: "bytes" or "ratio".

    Every error is a ValueError (a TypeError for a value that is neither int nor str) that
    names the value and lists the forms this entry point accepts.
    """

    def __init__(self, value, of=None, bare="bytes", name="budget"):
        if bare not in ("bytes", "ratio") or (bare == "ratio" and of is None):
            raise ValueError(f"Budget: bare must be 'bytes', or 'ratio' with `of`, got {bare!r}")
        self.value, self.of, self.bare, self.name = value, of, bare, name
        self.nbytes = self.share = None
        self.bare_share = False      # a share written as a bare number ("0.5")
        if isinstance(value, str):
            self._parse(value.strip())
        elif not isinstance(value, (bool, float)) and hasattr(value, "__index__"):
            self.nbytes = self._positive(index(value), index(value))
        else:
            raise TypeError(self._message("neither an int nor a string"))

    def forms(self):
        """The forms accepted here, as an error message lists them."""
        if self.bare == "ratio":
            return (f'a size ("6GiB", "512MB", "2000000000B") or a share of {self.of} '
                    f'("0.5", "0.5x", "50%")')
        text = '2000000000 (bytes), a size ("6GiB", "512MB", "1.5 GiB")'
        return text if self.of is None else f'{text} or a share of {self.of} ("0.5x", "50%")'

    def resolve(self, total=None, limit=ARENA_LIMIT, limit_name="an arena holds"):
        """Bytes of this budget: a share is of `total` (bytes); at most `limit` bytes."""
        nbytes = self.nbytes
        if nbytes is None:
            if total is None:
                raise ValueError(self._message(f"a share needs {self.of}, which is not known "
                                               "here; give a size"))
            nbytes = int(Decimal(int(total)) * self.share)
            if nbytes < 1:
                raise EmptyBudget(self._message(f"is less than 1 byte of {self.of} "
                                                f"({int(total):,} bytes)"))
        if nbytes > limit:
            problem = f"{nbytes:,} bytes is more than {limit_name} ({limit:,} bytes)"
            if self.bare_share:
                # a byte count written without its unit, read as a share
                problem = (f"a bare number is a share of {self.of} here ({int(total):,} "
                           f"bytes), so {problem}; for bytes write '{self.value.strip()}B'")
            raise ValueError(self._message(problem))
        return nbytes

    @property
    def is_share(self):
        """True for a share of a total ("0.5x", "50%", a bare ratio), False for a size."""
        return self.share is not None

    def _parse(self, text):
        match = _FORM.fullmatch(text)
        if match is None:
            raise ValueError(self._message("not a budget"))
        number, unit = Decimal(match.group(1)), match.group(2).lower()
        if unit in ("x", "%") or (unit == "" and self.bare == "ratio"):
            if self.of is None:
                raise ValueError(self._message("a share needs a total, and there is none here"))
            share = number / 100 if unit == "%" else number
            self.share = self._positive(share, number)
            self.bare_share = unit == ""
        elif unit == "" and "." in match.group(1):
            raise ValueError(self._message("a bare number is bytes here, and bytes are whole"))
        elif unit == "" or unit in UNITS:
            nbytes = int(number * UNITS.get(unit, 1))
            self._positive(number, number)
            if nbytes < 1:
                raise ValueError(self._message("is less than 1 byte"))
            self.nbytes = nbytes
        else:
            raise ValueError(self._message(f"unknown unit {match.group(2)!r} (units: B, KB, MB, "
                                           "GB, TB, KiB, MiB, GiB, TiB)"))

    def _positive(self, value, number):
        if number <= 0:
            raise ValueError(self._message("must be more than 0"))
        return value

    def _message(self, problem):
        return f"{self.name} {repr(self.value)[:80]}: {problem}; give {self.forms()}"

    def __repr__(self):
        return f"Budget({self.value!r})"


def parse_budget(value, total=None, of="the total", limit=ARENA_LIMIT,
                 limit_name="an arena holds", name="budget"):
    """Bytes of a budget: an int > 0, a size ("6GiB", "512MB") or, with `total`, a share of
    it ("0.5x", "50%"); at most `limit` bytes. Sizes with a fraction round down to whole
    bytes; a result of 0 bytes is an error, named as `name` in the message."""
    budget = Budget(value, of=of if total is not None else None, name=name)
    return budget.resolve(total, limit, limit_name)
