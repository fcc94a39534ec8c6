"""Kubernetes: the Eviction API, PriorityClass-scoped quotas, node holds, Kueue ClusterQueues in a cohort.

`objects` is a leaf of plain object helpers the others share (view, node_holds -> objects; actuator -> view;
kueue -> actuator, node_holds), so they never import each other in a circle.
"""
