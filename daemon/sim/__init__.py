"""The one simulator: the cluster behind `run --sim`, `simulate` and every replay.

The one simulator: job table and scheduler with node placement (cluster), demand (workloads), the simulated source
and actuator behind `run --sim`, and the replay that compares strategies on the same physics.
"""
