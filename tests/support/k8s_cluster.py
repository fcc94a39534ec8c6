"""A real Kubernetes control plane on 127.0.0.1 for the tests: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and kwok, built from the Go module proxy by scripts/build-k8s.sh.

Everything runs from a tmp dir: certificates are made at start (a CA, the apiserver's serving certificate, a
client certificate per component, the service-account signing key), each server gets free ports, and all of
them are stopped after. GPU nodes are KWOK nodes (``gpu_node``): Node objects with ``nvidia.com/gpu`` capacity
and the ``nvidia.com/gpu.product`` label that kwok's stages make Ready; pods bound to them reach Running, and a
deleted pod goes away. The fixture (tests/support/fixtures.py, ``kube``) starts one per xdist worker.

The binaries are not found: the suite fails with the command that builds them (``make test`` runs it first).
"""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml
from kubernetes import client as k8s, config as kcfg
from kubernetes.client.exceptions import ApiException

from tests.conftest import REPO, free_port
from tests.support.services import stop, wait_for

BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")
# the controllers the tests need: PDB status (disruption), service accounts and their tokens, namespace deletion,
# owner references, the workload controllers Kueue's jobs go through, DaemonSets (their pods on the nodes they
# select), node lifecycle (it lifts the not-ready taint the TaintNodesByCondition admission puts on every new node
# once kwok reports it Ready), and resource quota (a ResourceQuota's status, which quota admission needs before it
# admits a pod against it), and cluster role aggregation (the default edit and admin roles get their rules from it: a
# test acts as a tenant holding them), and resource claims (a pod's ResourceClaim made from its ResourceClaimTemplate,
# which the scheduler allocates devices to: DRA)
CONTROLLERS = ",".join(f"{c}-controller" for c in (
    "serviceaccount", "serviceaccount-token", "disruption", "namespace", "garbage-collector", "replicaset",
    "deployment", "daemonset", "job", "pod-garbage-collector", "root-ca-certificate-publisher", "node-lifecycle",
    "resourcequota", "clusterrole-aggregation", "resourceclaim"))
KWOK_NODE = "kwok.x-k8s.io/node"
# kwok's own stages, from the pinned module (build-k8s.sh copies them beside the binaries): nodes become Ready and
# renew their Lease, bound pods become Running, deleted pods go
KWOK_STAGES = ("node-initialize.yaml", "node-heartbeat-with-lease.yaml", "pod-ready.yaml", "pod-delete.yaml")
GPU_MODELS = {"a100": "NVIDIA-A100-SXM4-80GB", "h100": "NVIDIA-H100-80GB-HBM3", "t4": "Tesla-T4"}
PRODUCT_LABEL = "nvidia.com/gpu.product"
BUILD = "scripts/build-k8s.sh"


class ControlPlaneMissing(RuntimeError):
    """The binaries are not built: the message says how to build them."""


def bin_dir() -> Path:
    """The build cache's bin directory for the pinned versions (build-k8s.sh --bin-dir says where)."""
    out = subprocess.run(["bash", str(REPO / BUILD), "--bin-dir"], capture_output=True, text=True)
    if out.returncode != 0:
        raise ControlPlaneMissing(f"{BUILD} --bin-dir failed: {out.stderr.strip()}")
    return Path(out.stdout.strip())


def find_binaries() -> Path:
    d = bin_dir()
    missing = [b for b in BINARIES if not os.access(d / b, os.X_OK)]
    if missing:
        raise ControlPlaneMissing(f"the Kubernetes control plane is not built ({', '.join(missing)} missing in {d}):"
                                  f" run `bash {BUILD}` (`make test` does)")
    return d


def _openssl(*args: str, cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])}: {out.stderr.strip()}")


EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
LEAF = ("-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=clientAuth,serverAuth")


def make_certs(d: Path) -> None:
    """A CA; the apiserver's serving certificate (127.0.0.1, localhost, the in-cluster names); client
    certificates for the admin (system:masters) and each component; the service-account signing key."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl not installed (Debian package openssl)")
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3", "-subj", "/CN=gpuas-test-ca",
             cwd=d)
    sans = "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"
    certs = {"apiserver": ("/CN=kube-apiserver", sans), "admin": ("/O=system:masters/CN=admin", None),
             "scheduler": ("/CN=system:kube-scheduler", None),
             "controller-manager": ("/CN=system:kube-controller-manager", None)}
    for name, (subj, ext) in certs.items():
        _openssl("req", "-x509", *EC, "-CA", "ca.crt", "-CAkey", "ca.key", "-keyout", f"{name}.key",
                 "-out", f"{name}.crt", "-days", "3", "-subj", subj, *LEAF, *(("-addext", ext) if ext else ()), cwd=d)
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=d)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def kubeconfig(path: Path, server: str, ca: Path, cert: Path | None = None, key: Path | None = None,
               token: str | None = None) -> Path:
    user = (f"    client-certificate: {cert}\n    client-key: {key}\n" if cert else f"    token: {token}\n")
    path.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n"
                    f"    certificate-authority: {ca}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: test\n"
                    f"  context:\n    cluster: test\n    user: u\ncurrent-context: test\n")
    return path


@dataclass
class ControlPlane:
    tmp: Path
    bins: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, object] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # seconds from start to each component ready
    server: str = ""
    etcd: str = ""  # etcd's client URL (a test compacts its history to see a watch expire)
    admin_kubeconfig: Path | None = None
    health: dict[str, str] = field(default_factory=dict)  # component -> its /healthz URL
    made: dict[str, list[str]] = field(default_factory=lambda: {"namespaces": [], "nodes": []})  # since cleanup()
    _admin: k8s.ApiClient | None = None

    # ---- start / stop ------------------------------------------------------------------------
    def _run(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w")
        self.logs[name] = log
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                                            env={**os.environ, **(env or {})})
        return self.procs[name]

    def log_tail(self, name: str, lines: int = 30) -> str:
        p = self.tmp / f"{name}.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""

    def _wait(self, name: str, check, timeout: float) -> None:
        """Until `check()` is truthy (exceptions mean not yet); fails at once, with its log, if `name` exits."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            try:
                if check():
                    return
            except Exception as exc:  # not up yet
                last = exc
            time.sleep(0.2)
        raise TimeoutError(f"{name} not ready after {timeout:g} s (last error: {last})\n--- {name} log:\n"
                           f"{self.log_tail(name)}")

    def start(self, timeout: float = 240.0, api_only: bool = False) -> "ControlPlane":
        """Everything, or with `api_only` etcd and the apiserver alone (a few seconds: for a test that needs an
        API server of its own, such as one without Kueue's CRDs, beside the worker's shared one)."""
        t0 = time.monotonic()
        d, b = self.tmp, self.bins
        make_certs(d)
        self.timings["certs"] = time.monotonic() - t0
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd = self.etcd = f"http://127.0.0.1:{etcd_port}"
        self._run("etcd", [str(b / "etcd"), "--name", "test", "--data-dir", str(d / "etcd"),
                           "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
                           "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                           "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                           "--initial-cluster", f"test=http://127.0.0.1:{peer_port}",
                           "--unsafe-no-fsync", "--log-level", "warn"])
        self._wait("etcd", lambda: httpx.get(f"{etcd}/health", timeout=2).json()["health"] == "true", timeout)
        self.timings["etcd"] = time.monotonic() - t0
        self.server = f"https://127.0.0.1:{api_port}"
        self._run("kube-apiserver", [
            str(b / "kube-apiserver"), f"--etcd-servers={etcd}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={api_port}", f"--cert-dir={d}",
            f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}", f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC,Node", "--allow-privileged=true",
            "--profiling=false", "--v=1"])
        admin = kubeconfig(d / "admin.kubeconfig", self.server, d / "ca.crt", d / "admin.crt", d / "admin.key")
        self.admin_kubeconfig = admin
        tls = ssl.create_default_context(cafile=str(d / "ca.crt"))
        tls.load_cert_chain(str(d / "admin.crt"), str(d / "admin.key"))

        def api_ready():
            return httpx.get(f"{self.server}/readyz", verify=tls, timeout=5).status_code == 200
        self._wait("kube-apiserver", api_ready, timeout)
        self.timings["kube-apiserver"] = time.monotonic() - t0
        if api_only:
            self.timings["ready"] = self.timings["kube-apiserver"]
            return self
        for comp, user in (("kube-scheduler", "scheduler"), ("kube-controller-manager", "controller-manager")):
            kc = kubeconfig(d / f"{user}.kubeconfig", self.server, d / "ca.crt", d / f"{user}.crt", d / f"{user}.key")
            port = free_port()
            extra = ([f"--controllers={CONTROLLERS}", f"--service-account-private-key-file={d / 'sa.key'}",
                      f"--root-ca-file={d / 'ca.crt'}", "--use-service-account-credentials=true",
                      "--concurrent-gc-syncs=2"] if comp == "kube-controller-manager" else [])
            self._run(comp, [str(b / comp), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                             f"--authorization-kubeconfig={kc}", "--leader-elect=false", "--bind-address=127.0.0.1",
                             f"--secure-port={port}", f"--cert-dir={d / comp}", "--v=1", *extra])
            self.health[comp] = f"https://127.0.0.1:{port}/healthz"
        stages = b.parent / "share" / "kwok-stages"
        cfg = d / "kwok.yaml"
        cfg.write_text("\n---\n".join((stages / s).read_text() for s in KWOK_STAGES))
        self._run("kwok", [str(b / "kwok"), f"--kubeconfig={admin}", f"--config={cfg}",
                           f"--manage-nodes-with-annotation-selector={KWOK_NODE}=fake",
                           "--node-ip=10.244.0.1", "--cidr=10.244.0.0/16", "--node-lease-duration-seconds=40",
                           f"--server-address=127.0.0.1:{free_port()}", f"--node-port={free_port()}"])
        for comp in ("kube-scheduler", "kube-controller-manager"):
            url = self.health[comp]
            self._wait(comp, lambda u=url: httpx.get(u, verify=False, timeout=5).text == "ok", timeout)
            self.timings[comp] = time.monotonic() - t0
        core = k8s.CoreV1Api(self.api())
        # the controller manager works: the default namespace's ServiceAccount is made (pods need one)
        self._wait("kube-controller-manager", lambda: core.read_namespaced_service_account("default", "default"),
                   timeout)
        # kwok works: a node it manages reports Ready (then goes)
        probe = self.gpu_node("kwok-probe", "t4", gpus=0)
        self._wait("kwok", lambda: self.node_ready("kwok-probe"), timeout)
        core.delete_node(probe)
        self.timings["kwok"] = self.timings["ready"] = time.monotonic() - t0
        return self

    def start_kueue(self, timeout: float = 240.0) -> None:
        """Kueue's manager on this control plane: its CRDs (the converted ones with its conversion webhook), its
        webhooks for Kueue's own objects, batch Jobs and JobSets, served on 127.0.0.1 with a certificate of this CA,
        and its batch/job and jobset integrations. The JobSet CRD (the release Kueue's go.sum pins,
        build-k8s.sh) is installed first, so Kueue makes a JobSet's Workload; no JobSet controller runs (a test
        makes a JobSet's child Jobs as that controller does, and the Job controller their pods)."""
        t0 = time.monotonic()
        d = self.tmp / "kueue"
        d.mkdir()
        _openssl("req", "-x509", *EC, "-CA", str(self.tmp / "ca.crt"), "-CAkey", str(self.tmp / "ca.key"),
                 "-keyout", "tls.key", "-out", "tls.crt", "-days", "3", "-subj", "/CN=kueue-webhook", *LEAF,
                 "-addext", "subjectAltName=IP:127.0.0.1", cwd=d)
        port, health = free_port(), free_port()
        base = f"https://127.0.0.1:{port}"
        ca = base64.b64encode((self.tmp / "ca.crt").read_bytes()).decode()
        share = self.bins.parent / "share" / "kueue"
        kust = yaml.safe_load((share / "crd-kustomization.yaml").read_text())
        converted = {yaml.safe_load((share / "crd-patches" / Path(x["path"]).name).read_text())["metadata"]["name"]
                     for x in kust.get("patches", []) if "webhook_in_" in x["path"]}
        ext = k8s.ApiextensionsV1Api(self.api())
        names: list[str] = []
        jobset = self.bins.parent / "share" / "jobset" / "jobsets.yaml"
        if not jobset.exists():
            raise ControlPlaneMissing(f"{jobset} is missing: run `bash {BUILD}` (`make test` does)")
        ext.create_custom_resource_definition(yaml.safe_load(jobset.read_text()))
        names.append("jobsets.jobset.x-k8s.io")
        for f in sorted((share / "crds").glob("*.yaml")):
            crd = yaml.safe_load(f.read_text())
            if crd["metadata"]["name"] in converted:
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"url": f"{base}/convert", "caBundle": ca}, "conversionReviewVersions": ["v1"]}}
            ext.create_custom_resource_definition(crd)
            names.append(crd["metadata"]["name"])

        def established():
            return all(any(c.type == "Established" and c.status == "True"
                           for c in (ext.read_custom_resource_definition(n).status.conditions or [])) for n in names)
        self._wait("kueue", established, timeout)
        adm = k8s.AdmissionregistrationV1Api(self.api())
        for doc in yaml.safe_load_all((share / "webhooks.yaml").read_text()):
            if not doc:
                continue
            doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
            hooks = []
            for w in doc["webhooks"]:
                path = w["clientConfig"]["service"]["path"]
                if "kueue-x-k8s-io" in path or path.endswith(("-batch-v1-job", "-jobset-x-k8s-io-v1alpha2-jobset")):
                    w["clientConfig"] = {"url": base + path, "caBundle": ca}
                    hooks.append(w)
            doc["webhooks"] = hooks
            if doc["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(doc)
            else:
                adm.create_validating_webhook_configuration(doc)
        k8s.CoreV1Api(self.api()).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="kueue-system")))
        cfg = d / "config.yaml"
        cfg.write_text(yaml.safe_dump({
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}, "metrics": {"bindAddress": "0"},
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(d)},
            "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}}))
        # Kueue 0.17 reads its metrics certificate from /etc/kueue/metrics/certs when it does not manage its own
        # (and its own would be for a Service's DNS name, not 127.0.0.1): it runs in a mount namespace of its own
        # where an overlay on /etc adds that directory, so nothing is written to this machine's /etc
        upper = d / "etc-overlay"
        (upper / "kueue" / "metrics" / "certs").mkdir(parents=True)
        for f in ("tls.crt", "tls.key"):
            shutil.copy(d / f, upper / "kueue" / "metrics" / "certs" / f)
        (d / "etc-work").mkdir()
        if shutil.which("unshare") is None:
            raise RuntimeError("unshare not installed (Debian package util-linux): Kueue's manager needs it here")
        overlay = f"lowerdir=/etc,upperdir={upper},workdir={d / 'etc-work'}"
        self._run("kueue", ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            'mount -t overlay overlay -o "$0" /etc && exec "$@"', overlay,
                            str(self.bins / "kueue"), f"--config={cfg}", "--feature-gates=VisibilityOnDemand=false"],
                  env={"KUBECONFIG": str(self.admin_kubeconfig)})
        self._wait("kueue", lambda: httpx.get(f"http://127.0.0.1:{health}/readyz", timeout=2).status_code == 200,
                   timeout)
        custom = k8s.CustomObjectsApi(self.api())
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "probe"},
                 "spec": {}}
        # its webhooks answer (a dry-run create goes through them and the conversion)
        self._wait("kueue", lambda: custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1",
                                                                          "resourceflavors", probe, dry_run="All"),
                   timeout)
        self.timings["kueue"] = time.monotonic() - t0

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            stop(self.procs[name])
        for log in self.logs.values():
            log.close()  # type: ignore[attr-defined]
        if self._admin is not None:
            self._admin.close()

    # ---- clients and objects -----------------------------------------------------------------
    def api(self, kubeconfig_path: Path | None = None) -> k8s.ApiClient:
        """An official-client ApiClient: the admin's (one, kept), or a new one from another kubeconfig."""
        if kubeconfig_path is None and self._admin is not None:
            return self._admin
        conf = k8s.Configuration()
        kcfg.load_kube_config(config_file=str(kubeconfig_path or self.admin_kubeconfig), client_configuration=conf)
        client = k8s.ApiClient(conf)
        if kubeconfig_path is None:
            self._admin = client
        return client

    def namespace(self, prefix: str = "t") -> str:
        """A new namespace with a unique name, once its default ServiceAccount exists (pods need it)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        core = k8s.CoreV1Api(self.api())
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
        self.made["namespaces"].append(name)
        wait_for(lambda: core.read_namespaced_service_account("default", name), timeout=60,
                 what=f"namespace {name}'s default ServiceAccount")
        return name

    def gpu_node(self, name: str, model: str = "a100", gpus: int = 8, labels: dict | None = None) -> str:
        """A KWOK node with `gpus` nvidia.com/gpu and the product label of `model` (GPU_MODELS); kwok makes it
        Ready (node_ready)."""
        cap = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        body = k8s.V1Node(
            metadata=k8s.V1ObjectMeta(name=name, annotations={KWOK_NODE: "fake"},
                                      labels={"type": "kwok", "kubernetes.io/hostname": name,
                                              PRODUCT_LABEL: GPU_MODELS[model], **(labels or {})}),
            spec=k8s.V1NodeSpec(taints=[]),
            status=k8s.V1NodeStatus(capacity=cap, allocatable=cap))
        k8s.CoreV1Api(self.api()).create_node(body)
        self.made["nodes"].append(name)
        return name

    def tenants(self, tiers: dict[str, str], nodes: int = 2, model: str = "a100", gpus: int = 8):
        """A namespace per tenant (name -> tier) and `nodes` KWOK nodes, once Ready: (TenantConfigs, namespace
        per tenant, node names)."""
        from daemon.config import TenantConfig

        ns = {t: self.namespace(t) for t in tiers}
        names = [self.gpu_node(f"{ns[next(iter(tiers))]}-n{i}", model, gpus=gpus) for i in range(1, nodes + 1)]
        wait_for(lambda: all(self.node_ready(n) for n in names), timeout=60, what="KWOK nodes Ready")
        return [TenantConfig(name=t, tier=tier, k8s_namespace=ns[t]) for t, tier in tiers.items()], ns, names

    def node_ready(self, name: str) -> bool:
        """Ready (kwok says so) and schedulable: the node controller lifted the not-ready taint."""
        node = k8s.CoreV1Api(self.api()).read_node(name)
        ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
        return ready and not any(t.key.startswith("node.kubernetes.io/") for t in (node.spec.taints or []))

    def request_counts(self) -> dict[tuple[str, str, str], float]:
        """The apiserver's own count of requests served, from its /metrics (apiserver_request_total summed over
        codes and the rest): (verb, resource, scope) -> requests since it started."""
        tls = ssl.create_default_context(cafile=str(self.tmp / "ca.crt"))
        tls.load_cert_chain(str(self.tmp / "admin.crt"), str(self.tmp / "admin.key"))
        text = httpx.get(f"{self.server}/metrics", verify=tls, timeout=30).text
        out: dict[tuple[str, str, str], float] = {}
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels, _, value = line[len("apiserver_request_total{"):].rpartition("} ")
            kv = dict(part.split("=", 1) for part in labels.split('",') if "=" in part)
            key = tuple(kv.get(k, "").strip('"') for k in ("verb", "resource", "scope"))
            out[key] = out.get(key, 0.0) + float(value)
        return out

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what the apiserver does every 5 minutes): a watch
        from an older resourceVersion that etcd serves (no watch cache: events) is answered 410 Gone."""
        rev = int(httpx.post(f"{self.etcd}/v3/kv/range", json={"key": base64.b64encode(b"/").decode()},
                             timeout=10).json()["header"]["revision"])
        httpx.post(f"{self.etcd}/v3/kv/compaction", json={"revision": str(rev), "physical": True},
                   timeout=30).raise_for_status()
        return rev

    def cleanup(self) -> None:
        """After a test: its pods go at once (grace 0, so none is left for the scheduler to place on the next
        test's nodes), then its namespaces and nodes."""
        core = k8s.CoreV1Api(self.api())
        for ns in self.made["namespaces"]:
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            core.delete_namespace(ns)
        self.delete_nodes(self.made["nodes"])
        self.made = {"namespaces": [], "nodes": []}

    def delete_nodes(self, names) -> None:
        core = k8s.CoreV1Api(self.api())
        for n in names:
            try:
                core.delete_node(n)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def start_control_plane(tmp: Path, api_only: bool = False) -> ControlPlane:
    cp = ControlPlane(tmp, find_binaries())
    try:
        return cp.start(api_only=api_only)
    except BaseException:
        cp.stop()
        raise


def gpu_pod(ns: str, name: str, gpus: int, priority_class: str | None = None, node_selector: dict | None = None,
            tolerations: list[dict] | None = None, labels: dict | None = None) -> dict:
    """A pod asking for `gpus` nvidia.com/gpu (limits; requests follow), as a tenant would submit it."""
    spec: dict = {"containers": [{"name": "main", "image": "registry.invalid/train:1",
                                  "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                  "terminationGracePeriodSeconds": 5}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": spec}


def pod_running(core: k8s.CoreV1Api, ns: str, name: str) -> bool:
    p = core.read_namespaced_pod(name, ns)
    return bool(p.spec.node_name) and p.status.phase == "Running"


def pod_gone(core: k8s.CoreV1Api, ns: str, name: str) -> bool:
    """Whether the pod is deleted (404); an evicted pod is gone once its grace period has run."""
    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as exc:
        return exc.status == 404
    return False


def unschedulable_because(core: k8s.CoreV1Api, ns: str, name: str) -> str | None:
    """The scheduler's message when it found no node for the pod (PodScheduled False, Unschedulable); None while it
    has not said so. A pod it bound is an error here: the caller expected it never to be."""
    p = core.read_namespaced_pod(name, ns)
    if p.spec.node_name:
        raise AssertionError(f"pod {ns}/{name} was bound to {p.spec.node_name}")
    for c in p.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return c.message
    return None


def wait_unschedulable(core: k8s.CoreV1Api, ns: str, name: str, timeout: float = 60.0) -> str:
    """Wait for the scheduler to say it found no node for the pod; its message. Fails at once if it binds it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = unschedulable_because(core, ns, name)  # raises AssertionError once bound
        if msg:
            return msg
        time.sleep(0.2)
    raise TimeoutError(f"the scheduler said nothing of pod {ns}/{name} within {timeout:g} s")
