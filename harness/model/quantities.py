"""A figure as a person writes it: three significant digits, in the unit that suits its size
("5968.987 ms" is "5.97 s", 241_000_000 bytes "230 MiB", 2_130_000 instructions "2.13 M").

Times (µs, ms, s, min), bytes (B, KiB, MiB, GiB, TiB) and plain counts ("": k, M, G) move to the
largest unit the figure is at least one of; any other unit is kept as it is. The report's words
(report/format.py) and the harness's own lines (a study's size) both write figures with it.
"""
from __future__ import annotations

import math

DASH = "—"
SIGNIFICANT = 3
# Each family: (unit, its size in the family's first unit), smallest first.
_TIME = (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0), ("min", 60.0))
_BYTES = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))
_COUNT = (("", 1), ("k", 1e3), ("M", 1e6), ("G", 1e9))
_FAMILIES = (_TIME, _BYTES, _COUNT)
_ALIASES = {"us": "µs", "bytes": "B"}


def _family(unit: str) -> tuple[tuple[str, float], ...] | None:
    for family in _FAMILIES:
        if any(name == unit for name, _ in family):
            return family
    return None


def _round(x: float, digits: int = SIGNIFICANT) -> float:
    """x rounded to ``digits`` significant digits."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def unit_for(x: float, unit: str) -> tuple[str, float]:
    """The unit ``x`` (in ``unit``) reads best in, and that unit's size in ``unit``: the largest
    of its family the rounded figure is at least one of (the smallest for a figure below all)."""
    unit = _ALIASES.get(unit, unit)
    family = _family(unit)
    if family is None or not math.isfinite(x) or x == 0:
        return unit, 1.0
    base = dict(family)[unit]
    size = abs(x) * base
    chosen = family[0]
    for name, factor in family:
        if _round(size / factor) >= 1:
            chosen = (name, factor)
    return chosen[0], chosen[1] / base


def digits(x: float, places: int = SIGNIFICANT) -> str:
    """``x`` to ``places`` significant digits, trailing zeros kept ("5.00", "597", "0.0500");
    a figure of more whole digits keeps them all ("4225")."""
    if x == 0:
        return "0"
    if abs(x) >= 10 ** places:
        return f"{x:.0f}"
    r = _round(x, places)
    decimals = max(0, places - 1 - math.floor(math.log10(abs(r))))
    return f"{r:.{decimals}f}"


def _joined(number: str, unit: str) -> str:
    return f"{number}{unit}" if unit in ("", "%") else f"{number} {unit}"


def _number(x: float, factor: float, sign: bool, unit: str = "") -> str:
    if math.isinf(x):
        return ("+" if sign and x > 0 else "-" if x < 0 else "") + "∞"
    whole = unit == "" and factor == 1 and float(x).is_integer()
    text = f"{x:.0f}" if whole else digits(x / factor)   # a count of things: "7", not "7.00"
    return f"+{text}" if sign and x >= 0 and text != "0" else text


def quantity(x: float | None, unit: str = "", sign: bool = False) -> str:
    """One figure: quantity(5968.987, "ms", sign=True) == "+5.97 s"; quantity(2.13e6) ==
    "2.13 M"; "—" when there is none."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    shown, factor = unit_for(float(x), unit)
    return _joined(_number(float(x), factor, sign, shown), shown)


def with_interval(x: float | None, low: float | None, high: float | None, unit: str = "",
                  sign: bool = False, label: str = "95% CI") -> str:
    """A figure and its interval in the figure's unit, so the three read together:
    "+5.97 s (95% CI +3.29 to +8.65 s)"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    shown, factor = unit_for(float(x), unit)
    head = _joined(_number(float(x), factor, sign, shown), shown)
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (low, high)):
        return head
    bounds = (f"{_number(float(low), factor, sign, shown)} to "
              f"{_number(float(high), factor, sign, shown)}")
    return f"{head} ({label} {_joined(bounds, shown)})"


def scales(unit: str) -> bool:
    """Whether a figure in ``unit`` moves to the unit that suits it (a time, a size, a count)."""
    return _family(_ALIASES.get(unit, unit)) is not None


def with_spread(x: float, sd: float | None, unit: str = "") -> str:
    """A mean and its spread in the mean's unit, the spread to the mean's decimals:
    "356 ± 28 ms", "4.87 ± 0.10 s" (a spread too small for those decimals keeps one significant
    digit: "1.19 ± 0.005 GiB"); the mean alone when there is no spread."""
    shown, factor = unit_for(float(x), unit)
    mean = _number(float(x), factor, False, shown)
    if sd is None or not math.isfinite(float(sd)) or not math.isfinite(float(x)):
        return _joined(mean, shown)
    spread = abs(float(sd)) / factor
    decimals = len(mean.partition(".")[2])
    if 0 < spread < 0.5 * 10 ** -decimals:
        decimals = -math.floor(math.log10(spread))
    return _joined(f"{mean} ± {spread:.{decimals}f}", shown)
