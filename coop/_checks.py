"""Argument checks shared by the runtime, the layers, the optimizers and data parallel: a
number of the right kind and range, or a ValueError naming the argument, its bound and the
value given (as the work would otherwise fail later, midway, or train on NaN)."""
import math
import numbers


def check_int(name, value, minimum=0, maximum=None):
    """value as an int, which must lie in [minimum, maximum] (no maximum: None); bools and
    floats are refused."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) \
        and value >= minimum and (maximum is None or value <= maximum)
    if not ok:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be an int {bound}, got {value!r}")
    return int(value)


def check_number(name, value, minimum=0.0, below=None, above_minimum=False, finite=True):
    """value as a float: a real number (not a bool nor a string) >= minimum (> minimum with
    above_minimum), < below when given, and finite unless finite=False."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and not math.isnan(value) and (not finite or math.isfinite(value)) \
        and (value > minimum if above_minimum else value >= minimum) \
        and (below is None or value < below)
    if not ok:
        bound = (f"in [{minimum:g}, {below:g})" if below is not None
                 else f"{'>' if above_minimum else '>='} {minimum:g}")
        raise ValueError(f"{name} must be a {'finite ' if finite else ''}number {bound}, "
                         f"got {value!r}")
    return float(value)
