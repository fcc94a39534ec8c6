"""Shipped deployment files are checked by the real tools: systemd-analyze, promtool, amtool."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_promtool_rules, need_binary

UNITS = ["gpu-autoscaler.service", "gpu-autoscaler-retrain.service", "gpu-autoscaler-retrain.timer"]


def test_systemd_units_verify(tmp_path):
    need_binary("systemd-analyze")
    exe = Path(sys.executable).parent / "gpu-autoscaler"
    assert exe.exists(), "package not installed in this environment"
    for u in UNITS:
        text = (REPO / "systemd" / u).read_text().replace("/opt/gpu-autoscaler/bin/gpu-autoscaler", str(exe))
        (tmp_path / u).write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", *[str(tmp_path / u) for u in UNITS]],
                       capture_output=True, text=True)
    # verify exits 0 on some parse warnings, so any output at all is a failure
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stderr


def test_systemd_verify_catches_a_broken_unit(tmp_path):
    need_binary("systemd-analyze")
    exe = Path(sys.executable).parent / "gpu-autoscaler"
    text = (REPO / "systemd" / UNITS[0]).read_text().replace("/opt/gpu-autoscaler/bin/gpu-autoscaler", str(exe))
    (tmp_path / UNITS[0]).write_text(text.replace("Type=notify", "Type=notifyy"))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / UNITS[0])], capture_output=True,
                       text=True)
    assert "Failed to parse service type" in r.stderr


def test_service_unit_has_what_an_sre_expects():
    u = (REPO / "systemd" / "gpu-autoscaler.service").read_text()
    for line in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "ProtectSystem=strict", "NoNewPrivileges=yes",
                 "StateDirectory=gpu-autoscaler"):
        assert line in u
    t = (REPO / "systemd" / "gpu-autoscaler-retrain.timer").read_text()
    assert "OnCalendar=" in t and "Persistent=true" in t


def test_alert_rules_pass_promtool():
    assert_promtool_rules("gpu-autoscaler-rules.yml", "gpu-autoscaler-rules.test.yml")


def test_alertmanager_route_is_valid():
    need_binary("amtool")
    r = subprocess.run(["amtool", "check-config", str(REPO / "deploy/alertmanager/gpu-autoscaler.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_example_config_is_valid():
    from daemon.config import load_config

    cfg = load_config(REPO / "deploy" / "config.example.toml")
    assert cfg.source.kind == "prometheus" and "slurm" in cfg.actuators.enabled


def test_node_exporter_says_no_driver_clearly():
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "node-exporter", "--once"], capture_output=True, text=True,
                       timeout=60)
    try:
        import pynvml

        pynvml.nvmlInit()
        has_gpu = True
    except Exception:
        has_gpu = False
    if has_gpu:
        pytest.skip("this machine has an NVIDIA driver")
    assert r.returncode == 0
    assert "no NVIDIA driver" in r.stderr
    assert "gpuas_node_nvml_up" in r.stdout and 'gpuas_node_nvml_up{driver=""} 0.0' in r.stdout


def test_tenant_of_pid_reads_the_job_from_the_cgroup_never_the_environment(tmp_path):
    """Issue 36: the account came from the process's own SLURM_JOB_ACCOUNT, which the user sets. Now the job id comes
    from slurmstepd's cgroup path (v1 and v2 shapes) and the account from Slurm for that job (here a lookup that
    records what it was asked); the environment is not read."""
    from daemon.sources.nvml_exporter import tenant_of_pid

    def proc(pid, cgroup=None, env=b"PATH=/bin\0SLURM_JOB_ACCOUNT=team-high\0"):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(env)
        if cgroup is not None:
            (tmp_path / str(pid) / "cgroup").write_text(cgroup)

    asked = []
    accounts = {"4242": "team-low", "77": "team-b"}

    def account_of(job):
        asked.append(job)
        return accounts.get(job)

    proc(10, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")          # cgroup v2
    proc(11, "12:devices:/slurm/uid_1000/job_77/step_batch\n4:memory:/slurm/uid_1000/job_77/step_batch\n")  # v1
    proc(12, "0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0/job_4242/\n")   # a job_ made below its own
    proc(13)                                                                               # no cgroup: the env alone
    proc(14, "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_4000_8000_"
             "123456789abc.slice/cri-containerd-aa.scope\n")
    assert tenant_of_pid(10, tmp_path, account_of) == "team-low"         # not the team-high its environment says
    assert tenant_of_pid(11, tmp_path, account_of) == "team-b"
    assert tenant_of_pid(12, tmp_path, account_of) == "slurm-job-9"      # its own job, which Slurm did not name
    assert tenant_of_pid(13, tmp_path, account_of) == "unknown"
    assert tenant_of_pid(14, tmp_path, account_of) == "k8s-pod-1b2c3d4e-0000-4000-8000-123456789abc"
    assert tenant_of_pid(15, tmp_path, account_of) == "unknown"          # gone
    assert asked == ["4242", "77", "9"]


def test_the_node_exporter_serves_this_host_only_unless_told():
    """Issue 36: it listened on 0.0.0.0 by default. The socket it opens, read from /proc/net/tcp: 127.0.0.1."""
    from tests.conftest import free_port

    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "daemon.cli", "node-exporter", "--port", str(port)],
                         stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:
            if "serving http://" in line:
                break
        listening = [ln.split()[1] for ln in Path("/proc/net/tcp").read_text().splitlines()[1:]
                     if ln.split()[3] == "0A" and ln.split()[1].endswith(f":{port:04X}")]
        assert listening == [f"0100007F:{port:04X}"], listening             # 127.0.0.1, little-endian hex
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_shipped_scrape_job_passes_promtool(tmp_path):
    """deploy/prometheus/gpu-autoscaler-scrape.yml: the daemon's scrape job, with the `authorization`
    credentials file that matches server.metrics_token_file (tests/web/test_metrics_auth.py scrapes with it)."""
    need_binary("promtool")
    token = tmp_path / "metrics-token"
    token.write_text("metrics-token-0123456789abcdef\n")
    text = (REPO / "deploy/prometheus/gpu-autoscaler-scrape.yml").read_text()
    assert "credentials_file: /etc/gpu-autoscaler/metrics-token" in text
    (tmp_path / "prometheus.yml").write_text(text.replace("/etc/gpu-autoscaler/metrics-token", str(token)))
    r = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_kubernetes_manifests_parse_and_agree_with_the_config_they_ship():
    """deploy/kubernetes/: every file parses and is listed in kustomization.yaml, the admission policies' too (their
    CRD before them); the ConfigMap's config.toml is valid, names its tokens as files of the mounted Secret (none
    inline), and the Deployment, Role, scrape annotations and admission policies agree with it: the policies read
    the AdmissionParams object the config names, which the ClusterRole lets the daemon write, and their bindings
    leave the daemon's own namespace alone. What the RBAC grants is tested on a real API server
    (tests/k8s/test_deploy_rbac.py)."""
    import tomllib

    import yaml

    from daemon.config.models import parse_config

    d = REPO / "deploy" / "kubernetes"
    files = sorted(str(p.relative_to(d)) for p in [*d.glob("*.yaml"), *d.glob("admission/*.yaml")])
    docs = {p: [x for x in yaml.safe_load_all((d / p).read_text()) if x] for p in files}
    kust = docs.pop("kustomization.yaml")[0]
    assert sorted(kust["resources"]) == sorted(docs), "kustomization.yaml lists every manifest"
    admission = [f for f in kust["resources"] if f.startswith("admission/")]
    assert admission[0] == "admission/params-crd.yaml", "the CRD before the policies that read its object"
    by_kind, classes = {}, {}
    for name, ds in docs.items():
        for x in ds:
            assert x.get("apiVersion") and x.get("kind") and x["metadata"].get("name"), name
            by_kind[x["kind"]] = x
            if x["kind"] == "PriorityClass":
                classes[x["metadata"]["name"]] = x
    # the tiers' PriorityClasses ship with the manifests (a dry run writes none, and a Job naming a class that does
    # not exist gets no Kueue Workload), as the daemon would write them: it creates a class only where none exists
    from daemon.actuators.k8s.actuator import PRIORITY_CLASSES
    from daemon.actuators.k8s.objects import priority_class_name

    assert classes == {priority_class_name(t): {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": priority_class_name(t), "labels": {"app.kubernetes.io/managed-by": "gpu-autoscaler"}},
        "value": value, "preemptionPolicy": policy, "globalDefault": False, "description": desc}
        for t, (value, policy, desc) in PRIORITY_CLASSES.items()}
    ns = by_kind["Namespace"]["metadata"]["name"]
    assert kust["namespace"] == ns
    raw = by_kind["ConfigMap"]["data"]["config.toml"]
    cfg = parse_config(tomllib.loads(raw))
    assert "token =" not in raw and "token=" not in raw, "tokens live in the Secret, never in the config"
    dep = by_kind["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2 and cfg.ha.enabled and cfg.ha.backend == "kubernetes" and cfg.ha.namespace == ns
    assert pod["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"]
    assert cfg.actuators.kubernetes.in_cluster and set(cfg.actuators.enabled) >= {"kubernetes", "kueue"}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    secret_dir = mounts[next(n for n, v in vols.items() if "secret" in v)]
    assert vols[next(n for n, v in vols.items() if "secret" in v)]["secret"]["secretName"] == \
        by_kind["Secret"]["metadata"]["name"]
    files_named = {cfg.server.webhook_token_file, cfg.server.metrics_token_file,
                   *(t.token_file for t in cfg.access.tokens)}
    assert {str(p.parent) for p in files_named} == {secret_dir}
    assert {p.name for p in files_named} == set(by_kind["Secret"]["stringData"])
    config_dir = mounts[next(n for n, v in vols.items() if "configMap" in v)]
    assert f"{config_dir}/config.toml" in pod["containers"][0]["args"]
    role_names = {n for r in by_kind["Role"]["rules"] for n in r.get("resourceNames", [])}
    assert f"{cfg.ha.lease_name}-overrides" in role_names
    for obj in (by_kind["Service"], dep["spec"]["template"]):
        ann = obj["metadata"]["annotations"]
        assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == str(cfg.server.port)
    assert pod["containers"][0]["ports"][0]["containerPort"] == cfg.server.port and cfg.server.host == "0.0.0.0"
    # the admission policies: their parameters are the object the daemon writes, by a name the ClusterRole grants
    params = cfg.actuators.kubernetes.admission_params
    assert params, "configmap.yaml sets actuators.kubernetes.admission_params"
    crd = by_kind["CustomResourceDefinition"]["spec"]
    param_kind = {"apiVersion": f"{crd['group']}/{crd['versions'][0]['name']}", "kind": crd["names"]["kind"]}
    policies = [x for f in admission for x in docs[f] if x["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [x for f in admission for x in docs[f] if x["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(policies) == len(bindings) == 6
    assert all(x["spec"]["paramKind"] == param_kind for x in policies)
    assert {b["spec"]["policyName"] for b in bindings} == {x["metadata"]["name"] for x in policies}
    for b in bindings:
        assert b["spec"]["paramRef"]["name"] == params, b["metadata"]["name"]
        # the daemon's own pods (its namespace, the Deployment's) are never judged by the tenants' rules
        excluded = [e for e in b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
                    if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"]
        assert len(excluded) == 1 and dep["metadata"]["namespace"] in excluded[0]["values"], b["metadata"]["name"]
    grants = [(r["verbs"], r.get("resourceNames")) for r in by_kind["ClusterRole"]["rules"]
              if r["apiGroups"] == [crd["group"]] and r["resources"] == [crd["names"]["plural"]]]
    assert sorted(grants) == sorted([(["create"], None), (["get", "update"], [params])]), grants


@pytest.mark.security
def test_every_dashboard_query_reads_the_daemons_own_series_only():
    """A tenant's pod that Prometheus scrapes can expose the daemon's metric names (gpuas_plan_stale 0,
    gpuas_reservation_gpus{tenant=...}); the operators' dashboard, like the alert rules, reads only the series of the
    daemon's scrape job: every vector selector of every panel, parsed as Prometheus reads it, carries
    job="gpu-autoscaler"."""
    import json

    import promql_parser

    dashboard = json.loads((REPO / "deploy" / "grafana" / "gpu-autoscaler-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 10
    unselected = []
    for expr in exprs:
        def visit(node, expr=expr):
            if isinstance(node, promql_parser.VectorSelector) and not any(
                    (m.name, m.value) == ("job", "gpu-autoscaler") and m.op == promql_parser.MatchOp.Equal
                    for m in node.matchers.matchers):
                unselected.append(f"{node} in {expr}")
        promql_parser.walk(promql_parser.parse(expr), visit)
    assert unselected == []
