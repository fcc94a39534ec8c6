"""The running daemon: the cycle loop, the wiring from config to runtime, and its metrics.

The running daemon: the loop (cycles, retrain, watchdog, signals), one cycle (collect, forecast, plan, apply), the
wiring from config to runtime, and its Prometheus metrics (telemetry).
"""
