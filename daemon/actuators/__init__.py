"""What changes the cluster (dry run everywhere): Slurm, Kubernetes with Kueue, limits in Redis.

What changes the cluster, behind explicit capability protocols (base): a log of decisions (log), the limits every
gateway replica reads (redis_limits), whole-node holds chosen by one rule the simulator shares (whole_nodes), Slurm
(slurm/) and Kubernetes with Kueue (k8s/). Dry run everywhere.
"""
