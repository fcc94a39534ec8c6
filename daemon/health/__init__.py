"""Per-job GPU health: pure detectors (detect.py), findings (types.py) and the reclaim policy (reclaim.py).

Policy-like: imports only daemon.config, numpy and pandas; the telemetry source is daemon/sources/job_telemetry.py
and the cycle's hook daemon/service/health.py.
"""
