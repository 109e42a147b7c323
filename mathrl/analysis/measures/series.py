"""Reading a run's logged series: the start and end of a per-step metric, its mean, its last value.

Pure functions of a run's metrics (a frame with one row per step), shared by the measures.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

NAN = math.nan
WINDOW = 5  # steps averaged for the start or end of a per-step metric (at most half a run)


def known(*xs) -> bool:
    """No value is None or NaN (numpy floats included)."""
    return all(x is not None and not (isinstance(x, (float, np.floating)) and math.isnan(x)) for x in xs)


def window(steps: int, size: int = WINDOW) -> int:
    """The steps a start or end value averages over a series of `steps`: `size`, at most half of them (so the start
    and the end never overlap), at least one."""
    return max(1, min(size, steps // 2))


def head_mean(run, col: str) -> float:
    """The mean of a logged column over a run's first `window` steps; NaN where it was not logged."""
    m = run.metrics
    return float(m[col].head(window(len(m))).mean()) if col in m and len(m) else NAN


def tail_mean(run, col: str) -> float:
    """The mean of a logged column over a run's last `window` steps; NaN where it was not logged."""
    m = run.metrics
    return float(m[col].tail(window(len(m))).mean()) if col in m and len(m) else NAN


def step_mean(metrics: pd.DataFrame, column: str) -> float:
    """The mean of a logged column over a run's steps; NaN where the run did not log it."""
    return float(metrics[column].mean()) if column in metrics else NAN


def logged(run, column: str, how: str = "last") -> float:
    """The last, mean, max or min of a logged column over a run's steps (NaN for a run without it or a result)."""
    s = run.metrics[column].dropna() if run.ok and column in run.metrics else pd.Series(dtype=float)
    return NAN if s.empty else float(s.iloc[-1] if how == "last" else getattr(s, how)())


def end_over_start(values: pd.Series) -> float:
    """The last over the first value of a logged series (NaN values left out); NaN when the first is not positive."""
    s = values.dropna()
    return float(s.iloc[-1] / s.iloc[0]) if len(s) and s.iloc[0] > 0 else NAN
