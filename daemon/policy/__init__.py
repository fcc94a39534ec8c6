"""The policy engine: pure functions from (forecast, state, memory, config) to a Plan."""

from daemon.policy.engine import plan, staleness_reason
from daemon.policy.types import Notification, Plan, PolicyMemory, Preemption, RateLimit

__all__ = ["plan", "staleness_reason", "Plan", "PolicyMemory", "Preemption", "RateLimit", "Notification"]
