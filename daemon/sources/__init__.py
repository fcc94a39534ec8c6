"""Where the demand comes from: Prometheus (DCGM exporter metrics) with its history, and pynvml.

Where the demand comes from, behind one protocol (base): Prometheus with the DCGM exporter's metrics (prometheus),
the daemon's own incremental history of them (history), a node exporter reading GPUs with pynvml (nvml_exporter),
and the URL redaction every reader of a source's address uses (redact).
"""
