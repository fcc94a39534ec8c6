"""What survives a restart: plans and events (SQLite), and the operator's audited changes.

What survives a restart: the SQLite store of plans and events (store), and the operator's audited changes
(overrides), kept in the lease backend under HA so a takeover keeps them.
"""
