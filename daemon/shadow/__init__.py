"""Shadow mode: what the daemon would have done while its actuators are in dry run, recorded each cycle
(record.py) and set against the demand seen afterwards (report.py). Pure: no I/O here; the state store keeps
the records (daemon/state/store.py) and the cycle writes them (daemon/service/cycle.py)."""
