"""gpu-autoscaler's daemon, one folder per concern.

gpu-autoscaler's daemon: one folder per concern. `cli` and `entry` are the commands; the rest are packages, each
with a docstring that says what it holds (README's folder map is rendered from them).
"""
