"""Node failure: Alertmanager's webhook, the circuit breaker, and the steps a node-down alert takes.

Node failure: Alertmanager's webhook payloads and the circuit breaker (alerts), and the steps a node-down alert
takes (handler): confirm with the scheduler, requeue, fence, tell the tenants.
"""
