"""Demand forecasting for gpu-autoscaler: series prep, baselines, a global quantile LSTM, backtests.

This package has no daemon imports so it can be used (and tested) on its own.
"""

from forecaster.types import Forecast

__all__ = ["Forecast"]
