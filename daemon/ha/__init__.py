"""High availability: a leader lease with a fencing token, checked before every command.

High availability: one acting replica. A leader lease with a fencing token (Redis: lease; Kubernetes Lease API:
lease_k8s), and the fenced actuator that checks the token before every command (fencing).
"""
