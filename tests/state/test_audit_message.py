"""An operator change's audit message reads as an operator writes it (found on a first day, in make run's events:
"demo-operator created window eod-batch of tenant-0002: at None -> 14:00, borrowable_before None -> True, ...",
"changed all tenants: preemption_paused None -> True", "rate_override None -> 20.0"). The event's `changes` keep
the values themselves (null, true, 20.0)."""

from daemon.config import WindowConfig
from daemon.state.overrides import Overrides

W = {"name": "eod", "tenant": "tenant-0001", "gpus": 16, "every": "weekdays", "at": "14:00",
     "timezone": "Europe/Paris", "duration_minutes": 120}


def test_audit_messages_say_config_true_and_whole_numbers_and_a_new_window_what_it_is():
    o = Overrides(None)
    d = o.change_tenant("ops", "tenant-0010", {"tier": "high", "rate_override": 20, "floor_gpus": 16})["audit"]
    assert d["message"] == "ops changed tenant-0010: floor_gpus (config) -> 16, rate_override (config) -> 20, " \
                           "tier (config) -> high"
    assert d["changes"]["rate_override"] == {"from": None, "to": 20.0}
    d = o.change_global("ops", {"preemption_paused": True})["audit"]
    assert d["message"] == "ops changed all tenants: preemption_paused (config) -> true"
    d = o.change_window("ops", "eod", WindowConfig.model_validate(W), lambda ws: [])["audit"]
    assert d["message"] == ("ops created window eod of tenant-0001: at 14:00, borrowable_before true, "
                            "duration_minutes 120, every weekdays, gpus 16, reclaim_before_minutes 30, "
                            "tenant tenant-0001, timezone Europe/Paris")
    d = o.change_window("ops", "eod", WindowConfig.model_validate({**W, "gpus": 32}), lambda ws: [])["audit"]
    assert d["message"] == "ops changed window eod of tenant-0001: gpus 16 -> 32"
    d = o.change_window("ops", "eod", None, lambda ws: [])["audit"]
    assert d["message"].startswith("ops deleted window eod of tenant-0001: at 14:00")
