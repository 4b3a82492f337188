"""Figures as a person writes them: three significant digits in the unit that suits them."""
import math

import pytest

from harness.model.quantities import quantity, with_interval


@pytest.mark.parametrize("x, unit, text", [
    (5968.987, "ms", "5.97 s"),
    (0.4567, "ms", "457 µs"),
    (12.345, "ms", "12.3 ms"),
    (999.6, "ms", "1.00 s"),            # rounding carries it into the next unit
    (59.99, "s", "1.00 min"),
    (754.0, "s", "12.6 min"),
    (3.0, "s", "3.00 s"),
    (152.0, "µs", "152 µs"),
    (1520.0, "us", "1.52 ms"),
    (0.5, "µs", "0.500 µs"),            # below the smallest unit: still three digits
    (512, "B", "512 B"),
    (241_000_000, "B", "230 MiB"),
    (1.2 * 2**30, "B", "1.20 GiB"),
    (3.5, "MiB", "3.50 MiB"),
    (2048, "MiB", "2.00 GiB"),
    (7, "", "7"),
    (20_993, "", "21.0 k"),
    (2_130_000, "", "2.13 M"),
    (8.56e6, "", "8.56 M"),
    (4225.0, "req/s", "4225 req/s"),    # a unit of no family is kept: every whole digit stays
    (12.34, "%", "12.3%"),
    (0, "ms", "0 ms"),
])
def test_a_figure_reads_in_the_unit_that_suits_it(x, unit, text):
    assert quantity(x, unit) == text


def test_signs():
    assert quantity(5968.987, "ms", sign=True) == "+5.97 s"
    assert quantity(-5968.987, "ms", sign=True) == "-5.97 s"
    assert quantity(-0.25, "ms") == "-250 µs"
    assert quantity(0, "ms", sign=True) == "0 ms"


def test_a_missing_figure_is_a_dash_and_an_infinite_one_says_so():
    assert quantity(float("nan"), "ms") == "—" and quantity(None) == "—"
    assert quantity(math.inf, "s") == "∞ s"


def test_an_interval_reads_in_its_figure_s_unit():
    assert (with_interval(5968.987, 3290.082, 8647.892, "ms", sign=True)
            == "+5.97 s (95% CI +3.29 to +8.65 s)")
    assert (with_interval(-0.8, -1.6, 0.05, "ms", sign=True)
            == "-800 µs (95% CI -1600 to +50.0 µs)")
    assert with_interval(2.5e6, 2.4e6, 2.6e6, "") == "2.50 M (95% CI 2.40 to 2.60 M)"
    assert with_interval(5.0, float("nan"), 6.0, "ms") == "5.00 ms"
