"""The actuator test double the cycle, HA and health tests build on: the Actuator protocol's three methods and
nothing more, so a test writes only the capability it records (fence_node, reclaim, release_holds...) and a
capability check sees exactly what that test declared."""

from __future__ import annotations

from daemon.actuators.base import ActionReport


class QuietActuator:
    """Does nothing and reports nothing: apply, requeue and notify each answer an empty report, as `name`, not in
    dry run (the cycle treats it as a real actuator)."""

    name = "quiet"
    dry_run = False

    def apply(self, plan) -> ActionReport:
        return ActionReport(self.name, False)

    def requeue(self, job_ids, reason) -> ActionReport:
        return ActionReport(self.name, False)

    def notify(self, notes) -> ActionReport:
        return ActionReport(self.name, False)
