"""Actuator capabilities are explicit Protocols; the daemon asks them, never probes attribute names."""

from kubernetes import client as k8s

from daemon.actuators.base import Actuator, FencesNodes, ListsClusterJobs, ListsClusterNodes, ListsNodeJobs, capable
from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.log import LogActuator
from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import KubernetesActuatorConfig, SlurmActuatorConfig, TenantConfig

TENANTS = [TenantConfig(name="a", tier="high")]


def test_each_actuator_declares_what_it_can_do():
    slurm = SlurmActuator(SlurmActuatorConfig(), TENANTS)
    kube = KubernetesActuator(k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid")), KubernetesActuatorConfig(),
                              TENANTS)
    log = LogActuator()
    for a in (slurm, kube, log):
        assert isinstance(a, Actuator)
    assert capable([log, slurm, kube], FencesNodes) == [slurm, kube]
    assert capable([log, slurm, kube], ListsNodeJobs) == [slurm, kube]
    assert capable([log, slurm, kube], ListsClusterJobs) == [slurm, kube]
    assert capable([log, slurm, kube], ListsClusterNodes) == [slurm, kube]


def test_a_forwarding_wrapper_has_exactly_the_wrapped_capabilities():
    class Fenced:  # the shape a leader-fencing layer can take
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

    assert isinstance(Fenced(SlurmActuator(SlurmActuatorConfig(), TENANTS)), ListsClusterJobs)
    assert isinstance(Fenced(SlurmActuator(SlurmActuatorConfig(), TENANTS)), ListsClusterNodes)
    assert not isinstance(Fenced(LogActuator()), FencesNodes)


def test_stopping_daemon_releases_holds(tmp_path):
    from daemon.actuators.base import ActionReport, HoldsCapacity
    from daemon.config import Config, SimulatorConfig, SourceConfig
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime

    class Holder(LogActuator):
        released = 0

        def release_holds(self):
            self.released += 1
            return ActionReport("holder", False, ["release hold x"])

    cfg = Config(cluster={"gpus": 64},
                 source=SourceConfig(simulator=SimulatorConfig(seed=1, tenants=4, warmup_steps=50)),
                 state={"path": tmp_path / "s.sqlite"}, forecaster={"model_dir": tmp_path / "m"})
    holder = Holder()
    assert isinstance(holder, HoldsCapacity) and not isinstance(LogActuator(), HoldsCapacity)
    d = Daemon(build_runtime(cfg), serve_http=False)
    d.runtime.actuators.append(holder)
    d.stop()
    assert holder.released == 1
    standby = Daemon(build_runtime(cfg), serve_http=False)  # a replica that may not act leaves the holds alone
    standby.runtime.actuators.append(holder)
    standby.may_act = lambda: False
    standby.stop()
    assert holder.released == 1


def test_an_actuators_own_warnings_reach_every_channel(tmp_path):
    from daemon.actuators.base import ActionReport
    from daemon.config import Config, SimulatorConfig, SourceConfig
    from daemon.policy.types import Notification
    from daemon.service.wiring import build_runtime

    warning = Notification("t1", "preempt_warning", "job 7 will be requeued in 60 s")

    class Warner(LogActuator):
        def apply(self, plan):
            return ActionReport("warner", False, notifications=[warning])

    class Channel(LogActuator):
        def __init__(self):
            super().__init__()
            self.told = []

        def notify(self, notes):
            self.told.extend(notes)
            return super().notify(notes)

    cfg = Config(cluster={"gpus": 64},
                 source=SourceConfig(simulator=SimulatorConfig(seed=1, tenants=4, warmup_steps=50)),
                 state={"path": tmp_path / "s.sqlite"}, forecaster={"model_dir": tmp_path / "m"})
    rt = build_runtime(cfg)
    channel = Channel()
    rt.runner.actuators += [Warner(), channel]
    rt.runner.run_once()
    assert warning in channel.told
    rt.close()
