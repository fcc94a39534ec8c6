"""Kubernetes: evictions through the Eviction API, PriorityClass-scoped quotas, node holds, and Kueue
ClusterQueues in a cohort. `objects` is a leaf of plain object helpers the others share."""
