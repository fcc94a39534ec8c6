"""Which forecaster runs, how its live forecasts score, and `retrain`, which picks the model in use.

Which forecaster the daemon runs (choose), how its live forecasts score (quality), and `retrain`, which scores the
LSTM against the baselines on the cluster's own data and promotes the winner. The model families themselves live in
the top-level `forecaster` library.
"""
