"""Slurm: preemptions (requeue, warn, AdminComment), node fencing, and holds as reservations."""
