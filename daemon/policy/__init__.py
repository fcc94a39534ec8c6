"""The policy engine: pure functions from (forecast, state, memory, config) to a Plan.

No I/O, no clock, no randomness: the engine (engine) in sections for aging, holds (reservation), preemption
and its budget, rate limits, the safe default (safe), the cluster state it reads (state) and the plan-to-plan
events (events). It imports only the config, the forecaster's types, numpy and pandas.
"""

from daemon.policy.engine import plan, staleness_reason
from daemon.policy.types import Notification, Plan, PolicyMemory, Preemption, RateLimit

__all__ = ["plan", "staleness_reason", "Plan", "PolicyMemory", "Preemption", "RateLimit", "Notification"]
