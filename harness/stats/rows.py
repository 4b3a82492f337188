"""What every lane computes over request rows the same way: which rows succeeded, and a
percentile that ignores missing values and is NaN when nothing is left (numpy's default linear
interpolation)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd


def is_success(rows: pd.DataFrame) -> pd.Series:
    """True where the request succeeded (``error_kind`` empty or missing)."""
    return rows["error_kind"].fillna("") == ""


def successful(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[is_success(rows)]


def percentile(values, q: float) -> float:
    a = np.asarray(values, dtype="float64")
    a = a[~np.isnan(a)]
    return float(np.percentile(a, q)) if a.size else math.nan
