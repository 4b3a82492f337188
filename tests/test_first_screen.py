"""The report's first screen reads as a person writes: figures at three significant digits in
the unit that suits them, and a banner of one line with the rest behind "Why"."""
import html
import math
import re

import pandas as pd

from harness.stats.outcomes import Basis, Outcome
from report import format as F
from report import summary


def _difference(diff, low, high, metric="overhead_vs_mock_p50_ms"):
    return pd.Series({"metric": metric, "system": "litellm", "outcome": Outcome.WORSE,
                      "basis": Basis.DIFFERENCE, "diff": diff, "diff_low": low,
                      "diff_high": high, "ratio": math.nan, "ratio_sd": math.nan,
                      "p_value": 0.01, "n": 3, "n_ref": 3, "mean_ref": 0.1})


def test_a_finding_reads_its_difference_in_the_unit_that_suits_it():
    text = summary._finding(_difference(5968.987, 3290.082, 8647.892)).text
    assert "+5.97 s (95% CI +3.29 to +8.65 s)" in text, text
    memory = summary._finding(_difference(3 * 2**30, 2**30, 5 * 2**30, "rss_peak_bytes")).text
    assert "+3.00 GiB (95% CI +1.00 to +5.00 GiB)" in memory, memory


def test_a_metric_s_figure_is_scaled_before_its_unit_is_chosen():
    assert F.figure(241_000_000, "rss_peak_bytes") == "230 MiB"
    assert F.figure(0.123, "cpu_ms_per_request") == "123 µs"
    assert F.figure(2_130_000) == "2.13 M" and F.figure(math.nan, "throughput_rps") == F.DASH
    assert F.figure(0.985, "success_share") == "98.5%"


def test_a_table_figure_keeps_three_significant_digits_in_its_column_s_unit():
    assert F.mean_sd({"n": 3, "mean": 12.345, "sd": 0.4}, "latency_p50_ms", n=False,
                     compact=True) == "12.3 ± 0.4"
    assert F.mean_sd({"n": 3, "mean": 4224.68, "sd": 31.2}, "throughput_rps", n=False,
                     compact=True) == "4225 ± 31"


def test_a_headline_cell_reads_in_the_unit_that_suits_its_own_mean():
    """One column holds 72 µs and 356 ms: each cell in its own unit, the heading without one."""
    wire = "wire_in_gateway_p50_us"
    assert F.mean_sd_each({"n": 3, "mean": 355624.0, "sd": 27938.0}, wire) == "356 ± 28 ms"
    assert F.mean_sd_each({"n": 3, "mean": 72.0, "sd": 4.0}, wire) == "72.0 ± 4.0 µs"
    assert F.mean_sd_each({"n": 3, "mean": 4872.8, "sd": 96.0}, "net_overhead_p50_ms") == \
        "4.87 ± 0.10 s"
    # a spread too small for the mean's decimals keeps one significant digit, not "± 0.00"
    assert F.mean_sd_each({"n": 3, "mean": 1219 * 2**20, "sd": 5 * 2**20},
                          "rss_peak_bytes") == "1.19 ± 0.005 GiB"
    assert F.mean_sd_each({"n": 1, "mean": 1.69, "sd": math.nan}, "net_overhead_p50_ms") == \
        "1.69 ms"
    assert F.heading(wire, each_unit=True) == "in-gateway time p50 (wire)"
    # a unit that does not scale stays in the heading
    assert F.mean_sd_each({"n": 3, "mean": 939.4, "sd": 1.0}, "throughput_rps") == "939 ± 1"
    assert F.heading("throughput_rps", each_unit=True) == "throughput (req/s)"


def _words(markup) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", str(markup)))


def test_the_banner_is_one_line_that_says_a_shared_label_once():
    line = _words(summary.banner_line("behaviour", [f"s{i}" for i in range(7)], 7, 2,
                                      unstable=[f"s{i}" for i in range(7)]))
    assert line == ("Behaviour, not capacity. Read every figure as how the system behaved on this "
                    "2-core machine, not as the most it can do. Every system's run set is "
                    "unstable: the intervals are wide.")
    assert "7 of 7" not in line and "\n" not in line


def test_the_banner_names_the_few_systems_a_label_holds_for_and_counts_many():
    line = _words(summary.banner_line("behaviour", ["litellm", "mlflow"], 7, None,
                                      study_status="interrupted", unstable=list("abcd"),
                                      failed_runs=1))
    assert line == ("This study is interrupted. The figures cover the runs that completed. "
                    "Behaviour, not capacity. For litellm and mlflow, read the figures as how the "
                    "system behaved on this machine. Unstable run sets: 4 of 7 systems. 1 run did "
                    "not complete and is never averaged.")
    assert _words(summary.banner_line("capacity", [], 3, 8)).startswith("Capacity.")
    assert _words(summary.banner_line("failed", [], 0, 8)).startswith("No system completed a run")


def test_a_name_in_the_banner_is_escaped():
    assert "&lt;b&gt;" in str(summary.banner_line("behaviour", ["<b>"], 3, 2))
