"""The view's reading of required pod affinity and anti-affinity (daemon/actuators/k8s/pod_affinity.py) where the real
scheduler's test (tests/k8s/test_pod_affinity.py) cannot hold it still: a full node, kube-scheduler's own preemption
for anti-affinity, namespaces by labels the view does not read, and the cycle's bound on checks."""

import json

from kubernetes import client as k8s

from daemon.actuators.k8s import pod_affinity
from daemon.actuators.k8s.view import never_starts

API = k8s.ApiClient()
HOST = "kubernetes.io/hostname"


def _model(raw: dict, kind: str):
    return API.deserialize(json.dumps(raw), kind, "application/json")


def node(name: str, gpus: int = 8):
    return _model({"metadata": {"name": name, "labels": {HOST: name}},
                   "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}, "V1Node")


def pod(ns: str, name: str, gpus: int, labels=None, on=None, priority=0, near=None, away=None, policy=None,
        deleting=False):
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "priority": priority}
    if on:
        spec["nodeName"] = on
    if policy:
        spec["preemptionPolicy"] = policy
    aff = {}
    if near:
        aff["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [near]}
    if away:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [away]}
    if aff:
        spec["affinity"] = aff
    meta = {"namespace": ns, "name": name, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return _model({"metadata": meta, "spec": spec, "status": {"phase": "Running" if on else "Pending"}}, "V1Pod")


def term(labels, key=HOST, namespaces=None, ns_selector=None):
    t = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    if namespaces:
        t["namespaces"] = namespaces
    if ns_selector is not None:
        t["namespaceSelector"] = ns_selector
    return t


def judge(pending, placed, nodes=None):
    nodes = nodes or [node("n1")]
    return never_starts(nodes, "nvidia.com/gpu", pods=[*placed, pending])(pending, 4)


def test_pod_affinity_to_no_pod_is_judged_on_a_full_node_where_the_scheduler_says_insufficient_gpus():
    """The scheduler's verdict on a full node is 'Insufficient nvidia.com/gpu' (NodeResourcesFit runs before
    InterPodAffinity): the view judges the affinity itself, so the pod is no demand before the plan preempts for it."""
    full = pod("a", "web", 8, labels={"app": "web"}, on="n1")
    assert "requires pod affinity (app=ghost by kubernetes.io/hostname)" in judge(
        pod("b", "ghost", 4, near=term({"app": "ghost"})), [full])
    assert judge(pod("b", "near", 4, near=term({"app": "web"}, namespaces=["a"])), [full]) is None
    # the first of a group: it matches its own term, no bound pod does
    assert judge(pod("b", "first", 4, labels={"app": "g"}, near=term({"app": "g"})), [full]) is None
    # a pod matching the term exists, but it is not the pod's own namespace (the term names none): no node passes
    assert judge(pod("b", "other-ns", 4, near=term({"app": "web"})), [full]) is not None


def test_anti_affinity_to_pods_kube_scheduler_would_preempt_for_it_is_demand():
    """kube-scheduler preempts lower-priority pods that break a pending pod's anti-affinity: it starts, so it is
    demand. At their priority or below, with preemptionPolicy Never, it is not; a pod being deleted blocks nothing."""
    web = pod("a", "web", 1, labels={"app": "web"}, on="n1", priority=100)
    away = term({"app": "web"}, namespaces=["a"])
    assert judge(pod("b", "high", 4, priority=1000, away=away), [web]) is None
    assert "requires pod anti-affinity (app=web by kubernetes.io/hostname)" in judge(
        pod("b", "same", 4, priority=100, away=away), [web])
    assert judge(pod("b", "never", 4, priority=1000, away=away, policy="Never"), [web]) is not None
    going = pod("a", "web", 1, labels={"app": "web"}, on="n1", priority=100, deleting=True)
    assert judge(pod("b", "same", 4, priority=100, away=away), [going]) is None
    # a second node without such a pod: it starts there
    assert judge(pod("b", "same", 4, priority=100, away=away), [web], [node("n1"), node("n2")]) is None


def test_namespaces_chosen_by_labels_are_read_so_as_never_to_hide_a_pod_that_starts():
    """A namespaceSelector other than {} names namespaces by labels the view does not read: for affinity it may name
    any (a pod it may run beside counts), for anti-affinity only the namespaces it lists."""
    web = pod("a", "web", 1, labels={"app": "web"}, on="n1")
    some = {"matchLabels": {"team": "web"}}
    assert judge(pod("b", "near", 4, near=term({"app": "web"}, ns_selector=some)), [web]) is None
    assert judge(pod("b", "away", 4, away=term({"app": "web"}, ns_selector=some)), [web]) is None
    assert judge(pod("b", "away-all", 4, away=term({"app": "web"}, ns_selector={})), [web]) is not None


def test_past_the_cycles_bound_on_checks_a_pod_is_not_judged(monkeypatch):
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS", 0)
    web = pod("a", "web", 1, labels={"app": "web"}, on="n1")
    assert judge(pod("b", "ghost", 4, near={"labelSelector": {}, "topologyKey": "example.com/none"}), [web]) is None
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS", 10)
    assert judge(pod("b", "ghost", 4, near={"labelSelector": {}, "topologyKey": "example.com/none"}), [web]) \
        is not None


def test_the_bound_pods_kept_from_cycle_to_cycle_judge_as_those_read_afresh():
    """The actuator keeps the bound pods' rows and label index (BoundPods) from cycle to cycle, brought up to date by
    object: after a pod is bound, gone, relabelled or ended, or a node loses a label or leaves, its verdicts are
    those of rows read afresh (a stale cache keeps an earlier cycle's)."""
    kept = pod_affinity.BoundPods()
    near = pod("a", "near", 4, near=term({"app": "web"}))   # starts only beside a web pod
    away = pod("a", "away", 4, away=term({"app": "web"}))   # starts only on a node without one

    def starts(placed, nodes, pending=(near, away)):
        pods = [*placed, *pending]
        verdicts = [never_starts(nodes, "nvidia.com/gpu", pods=pods, bound=kept)(p, 4) for p in pending]
        assert verdicts == [never_starts(nodes, "nvidia.com/gpu", pods=pods)(p, 4) for p in pending]
        return [v is None for v in verdicts]

    web, web2 = pod("a", "web", 1, labels={"app": "web"}, on="n1"), pod("a", "web2", 1, labels={"app": "web"}, on="n2")
    both = [node("n1"), node("n2")]
    assert starts([], both) == [False, True]
    assert starts([web], both) == [True, True]                # bound
    assert starts([web, web2], both) == [True, False]
    assert starts([web], both) == [True, True]                # gone
    assert starts([pod("a", "web", 1, labels={"app": "db"}, on="n1")], both) == [False, True]   # relabelled
    assert starts([web], both) == [True, True]
    unkeyed = _model({"metadata": {"name": "n1", "labels": {}}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
                     "V1Node")
    assert starts([web], [unkeyed, node("n2")]) == [False, True]   # its node without the topology key
    assert starts([web], [node("n2")]) == [False, True]            # its node gone
    assert starts([web], both) == [True, True]
    ended = pod("a", "web", 1, labels={"app": "web"}, on="n1")
    ended.status.phase = "Succeeded"
    assert starts([ended], both) == [False, True]
    # the bound pod's node relabelled: its domain is the new zone (n1 is too small for the pending pod, n2 is not)
    zoned = pod("a", "zoned", 4, near=term({"app": "web"}, key="zone"))

    def zones(z1):
        return [_model({"metadata": {"name": name, "labels": {"zone": z}}, "status": {"allocatable": {
            "nvidia.com/gpu": gpus}}}, "V1Node") for name, z, gpus in (("n1", z1, "2"), ("n2", "z2", "8"))]

    assert starts([web], zones("z1"), [zoned]) == [False]
    assert starts([web], zones("z2"), [zoned]) == [True]
    assert starts([web], zones("z1"), [zoned]) == [False]


def test_a_selectors_values_count_against_the_cycles_bound(monkeypatch):
    """A tenant's pod may carry an In of 100,000 values (1.5 MB): checked as a list, each of the cycle's checks scanned
    them all, so 10 such pods over 1,000 bound pods took 14 s a cycle within the bound on checks. Its values count
    against the bound before they are read (past it the pod is not judged: it stays demand), and a check is a set
    look-up."""
    web = pod("a", "web", 1, labels={"app": "web"}, on="n1")
    many = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                     "values": [f"v{i}" for i in range(2_000)]}]},
            "topologyKey": HOST}
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS", 1_000)
    assert judge(pod("a", "many", 4, near=many), [web]) is None
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS", 10_000)
    assert "requires pod affinity (app In v0,v1" in judge(pod("a", "many", 4, near=many), [web])
    many["labelSelector"]["matchExpressions"][0]["values"].append("web")
    assert judge(pod("a", "many", 4, near=many), [web]) is None


def test_one_namespaces_costly_selectors_leave_the_other_tenants_pods_judged(monkeypatch):
    """The bound on checks was one budget for the cycle: a tenant's pods with costly selectors, judged first, spent it,
    and every other tenant's pod that can never start counted as demand again (held and preempted for). A namespace
    now spends at most its share; the others' pods are still judged."""
    web = pod("a", "web", 1, labels={"app": "web"}, on="n1")
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS", 10_000)
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS_PER_NAMESPACE", 2_500)
    costly = [pod("evil", f"e{k}", 4, near={"labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": [f"v{k}-{i}" for i in range(1_990)]}]}, "topologyKey": HOST})
        for k in range(6)]
    ghost = pod("b", "ghost", 4, near=term({"app": "ghost"}))
    why = never_starts([node("n1")], "nvidia.com/gpu", pods=[web, *costly, ghost])
    judged = [why(p, 4) for p in costly]
    assert judged[0] is not None and judged[1:] == [None] * 5   # its share spent on the first: the rest stay demand
    assert "requires pod affinity (app=ghost by" in (why(ghost, 4) or ""), why(ghost, 4)


def zoned(name: str, zone: str = "z1", gpus: int = 8):
    return _model({"metadata": {"name": name, "labels": {HOST: name, "zone": zone}},
                   "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}, "V1Node")


def test_a_bound_pods_anti_affinity_keeps_a_pending_pod_it_matches_off_its_domain():
    """kube-scheduler's InterPodAffinity filter also keeps a pod off a node where a bound pod's required anti-affinity
    term matches it (by that pod's node's value of the term's key): a tenant's one pod with anti-affinity by a zone
    every GPU node shares, matching another tenant's pods, kept them off every node, and they were demand (held and
    preempted for). Read as the pod's own anti-affinity: lower-priority pods are preempted for it, a pod being
    deleted blocks nothing, and the term's own namespace where it names none."""
    victim = pod("b", "victim", 4, labels={"app": "victim"})
    both = [zoned("n1"), zoned("n2")]
    wall = pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone", namespaces=["b"]))
    why = judge(victim, [wall], both)
    assert why is not None and why.startswith("is kept off every node it fits otherwise by bound pods' required "
                                              "anti-affinity (podAntiAffinity), at its priority or above"), why
    assert "a/wall (app=victim by zone)" in why, why
    # by hostname, it keeps the pod off its own node only
    assert judge(victim, [pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, namespaces=["b"]))], both) is None
    # another zone, other labels, its own namespace (it names none) or a node without the key: it starts
    assert judge(victim, [wall], [zoned("n1"), zoned("n2", "z2")]) is None
    assert judge(pod("b", "other", 4, labels={"app": "other"}), [wall], both) is None
    assert judge(victim, [pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone"))], both) is None
    assert judge(victim, [pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="rack", namespaces=["b"]))],
                 both) is None
    # kube-scheduler preempts a lower-priority pod for it (not with preemptionPolicy Never); one being deleted goes
    assert judge(pod("b", "victim", 4, labels={"app": "victim"}, priority=10), [wall], both) is None
    assert judge(pod("b", "victim", 4, labels={"app": "victim"}, priority=10, policy="Never"), [wall], both) \
        is not None
    going = pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone", namespaces=["b"]), deleting=True)
    assert judge(victim, [going], both) is None
    # by hostname on each node: one pod per node, counted, the first named
    walls = [pod("a", f"wall{k}", 0, on=f"n{k}", away=term({"app": "victim"}, namespaces=["b"])) for k in (1, 2, 3)]
    why = judge(victim, walls, [zoned("n1"), zoned("n2"), zoned("n3")])
    assert why is not None and "until those end, 3 pods: a/wall1 (app=victim by kubernetes.io/hostname), " in why, why


def test_a_bound_pods_anti_affinity_by_namespace_selector_counts_only_the_namespaces_it_surely_names():
    """A bound pod's term with a namespaceSelector: {} names every namespace (it keeps another tenant's pods away);
    one by labels names namespaces by labels the view does not read, so only those it lists count (a pod that may
    start is never hidden)."""
    victim = pod("b", "victim", 4, labels={"app": "victim"})
    both = [zoned("n1"), zoned("n2")]

    def wall(**kw):
        return pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone", **kw))
    assert "a/wall (app=victim by zone)" in (judge(victim, [wall(ns_selector={})], both) or "")
    assert judge(victim, [wall(ns_selector={"matchLabels": {"team": "b"}})], both) is None
    assert judge(victim, [wall(ns_selector={"matchLabels": {"team": "b"}}, namespaces=["b"])], both) is not None
    assert judge(victim, [wall(ns_selector={"matchLabels": {"team": "c"}}, namespaces=["c"])], both) is None


def test_the_kept_bound_pods_anti_affinity_judges_as_read_afresh_once_the_pod_is_gone():
    """The actuator's BoundPods keeps the pods with required anti-affinity from cycle to cycle: once such a pod is
    deleted, ends, or its node leaves, the pending pod it kept away is demand again, as rows read afresh say."""
    kept = pod_affinity.BoundPods()
    victim = pod("b", "victim", 4, labels={"app": "victim"})
    other = pod("a", "web", 1, labels={"app": "web"}, on="n2")

    def starts(placed, nodes):
        pods = [*placed, other, victim]
        verdict = never_starts(nodes, "nvidia.com/gpu", pods=pods, bound=kept)(victim, 4)
        assert verdict == never_starts(nodes, "nvidia.com/gpu", pods=pods)(victim, 4)
        return verdict is None

    wall = pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone", namespaces=["b"]))
    both = [zoned("n1"), zoned("n2")]
    assert starts([], both)
    assert not starts([wall], both)                  # bound
    assert starts([], both)                          # deleted
    assert not starts([wall], both)
    assert starts([pod("a", "wall", 0, on="n1", away=term({"app": "db"}, key="zone", namespaces=["b"]))], both)
    assert not starts([wall], both)
    assert starts([wall], [zoned("n1", "z0"), zoned("n2")])   # its node in another zone now
    assert starts([wall], [zoned("n2")])                      # its node gone
    assert not starts([wall], both)
    ended = pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone", namespaces=["b"]))
    ended.status.phase = "Succeeded"
    assert starts([ended], both)
    assert kept.anti.pods == {} and kept.anti.groups == {} and kept.anti.anchors == {}


def test_bound_pods_anti_affinity_counts_against_the_cycles_bound(monkeypatch):
    """A tenant's many bound pods with distinct anti-affinity terms cost each pending pod a check apiece: past the
    cycle's bound (or its namespace's share) the pod is not judged, and stays demand."""
    victim = pod("b", "victim", 4, labels={"app": "victim"})
    walls = [pod("a", f"wall{k}", 0, on="n1", away=term({"app": "victim", "k": str(k)}, namespaces=["b"]))
             for k in range(50)] + [pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, namespaces=["b"]))]
    assert judge(victim, walls) is not None
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS", 60)
    assert judge(victim, walls) is None


def test_a_tenants_own_namespace_anti_affinity_terms_cost_other_tenants_pods_nothing(monkeypatch):
    """Bound pods' anti-affinity groups were filed by label alone, so every pending pod paid for every anchorless
    group (a selector of NotIn / DoesNotExist only), charged to its own namespace's share: one pod of a tenant with
    many such terms in its own namespace (admitted: they reach no one) spent another tenant's share, and its pods that
    a bound pod keeps off every node went unjudged, demand again (held and preempted for). Groups are now filed under
    the namespaces they name: the others' pods never look at them."""
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS", 40_000)
    monkeypatch.setattr(pod_affinity, "MAX_CHECKS_PER_NAMESPACE", 10_000)
    both = [zoned("n1"), zoned("n2")]
    terms = [{"labelSelector": {"matchExpressions": [{"key": "k", "operator": "NotIn", "values": [f"v{i}"]}]},
              "topologyKey": "zone"} for i in range(1_000)]
    costly = pod("evil", "costly", 0, on="n2")
    costly.spec.affinity = _model({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}},
                                  "V1Affinity")
    wall = pod("b", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone"))
    victims = [pod("b", f"v{k}", 4, labels={"app": "victim", "job-name": f"j{k}"}) for k in range(10)]
    why = never_starts(both, "nvidia.com/gpu", pods=[costly, wall, *victims])
    judged = [why(v, 4) for v in victims]
    assert all(w is not None and "b/wall (app=victim by zone)" in w for w in judged), judged


def test_a_term_naming_many_namespaces_is_filed_once_and_still_judged():
    """A bound pod's term group is filed under each namespace it names, up to FILED_NAMESPACES; one naming more is
    filed once, as if it named every one, and each pending pod checks its own namespace against it."""
    both = [zoned("n1"), zoned("n2")]
    many = [f"ns{i}" for i in range(1_000)]
    kept = pod_affinity.BoundPods()
    wall = pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone", namespaces=[*many, "b"]))
    victim, elsewhere = (pod(ns, "victim", 4, labels={"app": "victim"}) for ns in ("b", "c"))
    why = never_starts(both, "nvidia.com/gpu", pods=[wall, victim, elsewhere], bound=kept)
    assert why(victim, 4) is not None and why(elsewhere, 4) is None
    assert len(kept.anti.anchors) == 1


def test_a_namespace_selector_by_the_namespaces_name_label_names_those_namespaces_surely():
    """The apiserver labels every namespace kubernetes.io/metadata.name=<its name> and refuses changing it, so a
    namespaceSelector by that label alone names its namespaces as surely as a list: a bound pod's term selecting
    another tenant's namespace so kept its pods off every node while the view read it as naming none (demand: held
    and preempted for). Other labels, or NotIn, are still not read."""
    victim = pod("b", "victim", 4, labels={"app": "victim"})
    both = [zoned("n1"), zoned("n2")]
    name = pod_affinity.NAME_LABEL

    def wall(sel):
        return pod("a", "wall", 0, on="n1", away=term({"app": "victim"}, key="zone", ns_selector=sel))
    for sel in ({"matchLabels": {name: "b"}},
                {"matchExpressions": [{"key": name, "operator": "In", "values": ["b", "c"]}]},
                {"matchExpressions": [{"key": name, "operator": "Exists"}]}):
        assert "a/wall (app=victim by zone)" in (judge(victim, [wall(sel)], both) or ""), sel
    for sel in ({"matchLabels": {name: "c"}},
                {"matchExpressions": [{"key": name, "operator": "NotIn", "values": ["c"]}]},
                {"matchLabels": {name: "b", "team": "b"}},
                {"matchLabels": {name: "b"}, "matchExpressions": [{"key": name, "operator": "DoesNotExist"}]}):
        assert judge(victim, [wall(sel)], both) is None, sel


def test_a_services_replicas_share_one_copy_of_their_anti_affinity_terms():
    """Each bound pod with required anti-affinity held its own compiled copy of its terms (a set of an In's values):
    a service's replicas with one term of many values held as many sets beside the view's pods. They now share the
    group's one (memory, not time: 100 replicas of a 1,000-value term)."""
    import tracemalloc

    away = {"labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": [f"v{i}" for i in range(1_000)]}]}, "topologyKey": "zone"}
    replicas = [pod("a", f"r{k}", 0, on="n1", away=away) for k in range(100)]
    anti = pod_affinity.BoundAnti()
    tracemalloc.start()
    try:
        anti.synced(replicas)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(anti.groups) == 1 and len(anti.pods) == 100
    assert held < 1_000_000, held     # a set of 1,000 values is about 32 KB: 100 of them 3.4 MB
    for p in replicas:
        assert anti.pods[id(p)][5][0] is next(iter(anti.groups))
    anti.synced([])
    assert anti.canon == {} and anti.groups == {} and anti.anchors == {}


def test_a_bound_pods_anti_affinity_by_not_in_keeps_off_pods_without_the_label():
    """A selector of NotIn alone requires no label (a pod without the key matches it), so its term group is filed
    under no anchor: filed under the key, a tenant's wall 'tier NotIn (system)' by zone missed every pod of another
    tenant that has no tier label, and those pods, kept off every node, were demand (held and preempted for)."""
    both = [zoned("n1"), zoned("n2")]
    away = {"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["system"]}]},
            "topologyKey": "zone", "namespaces": ["b"]}
    wall = pod("a", "wall", 0, on="n1", away=away)
    assert "a/wall (tier NotIn system by zone)" in (judge(pod("b", "victim", 4, labels={"app": "x"}), [wall], both)
                                                    or "")
    assert judge(pod("b", "victim", 4, labels={"tier": "batch"}), [wall], both) is not None
    assert judge(pod("b", "victim", 4, labels={"tier": "system"}), [wall], both) is None


def test_pod_affinity_by_not_in_the_namespaces_name_label_may_name_any_namespace():
    """NotIn on kubernetes.io/metadata.name selects every namespace but those: read generously for the pod's own
    affinity (a pod it may run beside counts), so a pod asking to run beside 'app=web in any namespace but c' starts
    beside a's web pod. Read as naming no namespace, it was a pod that never starts: not demand, never held for."""
    web = pod("a", "web", 1, labels={"app": "web"}, on="n1")
    sel = {"matchExpressions": [{"key": pod_affinity.NAME_LABEL, "operator": "NotIn", "values": ["c"]}]}
    assert judge(pod("b", "near", 4, near=term({"app": "web"}, ns_selector=sel)), [web]) is None
