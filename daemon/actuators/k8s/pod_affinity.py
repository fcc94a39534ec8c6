"""A pending pod's required inter-pod affinity and anti-affinity, as kube-scheduler's InterPodAffinity filter reads
them over the pods bound to nodes: which of the nodes it fits otherwise it may start on (view.never_starts).

The view judges this itself rather than reading the scheduler's verdict on the pod (as it does for volumes:
view.scheduler_verdict): InterPodAffinity is a node filter that runs after NodeResourcesFit, so on a full cluster the
scheduler says 'Insufficient nvidia.com/gpu' of every node and never reaches the affinity, and a pod that will never
start reads as waiting for GPUs: the plan preempts to make room and only then learns it was for nothing. The view
holds every live pod with its labels, so it can judge it on any cluster.

- Affinity (``podAffinity.requiredDuringSchedulingIgnoredDuringExecution``): a node passes where, for every term, it
  has the term's topologyKey and a pod matching all the terms is bound to a node with the same value of it. The
  scheduler's one exception (the first pod of a group): where no bound pod matches the terms at all and the pod
  matches its own terms, it passes on every node with the keys. Read generously (never a pod that will start read as
  never starting): a term's namespaceSelector, whose namespace labels the view does not read, is taken to select
  every namespace (one by ``kubernetes.io/metadata.name`` alone, the name the apiserver gives every namespace as a
  label, selects those it names), and the exception is granted wherever the pod matches its own terms.
- Anti-affinity (``podAntiAffinity.required...``): a node fails where a pod matching a term is bound in its domain
  (the node's value of the term's key). Read strictly: only the namespaces the term surely names (its list; an empty
  namespaceSelector's every namespace, one by kubernetes.io/metadata.name those it names; its own where neither is
  given), only pods not being deleted, and only pods
  kube-scheduler would not preempt for it (priority at or above its own, any where its preemptionPolicy is Never):
  a high-tier pod anti-affine to low-tier pods starts once the scheduler preempts them.
- Bound pods' anti-affinity (kube-scheduler's filter on existing pods' anti-affinity, symmetric to the pod's own): a
  node fails where a bound pod has a required anti-affinity term matching the pending pod (its labelSelector, which
  the apiserver has merged the term's matchLabelKeys / mismatchLabelKeys into, on the pod's labels; its namespaces
  on the pod's namespace) and that pod's node has the same value of the term's key. Read as the pod's own
  anti-affinity: only namespaces the term surely names (its own namespace where it names none), not pods being
  deleted, and only pods kube-scheduler would not preempt for the pending pod. Any pending pod is judged so, with pod
  affinity of its own or not (BoundAnti keeps the bound pods with such terms, normally few, from cycle to cycle).
  A tenant's one pod with anti-affinity by a zone every GPU node shares, matching another tenant's pods, keeps them
  off every node: they wait forever ('didn't satisfy existing pods anti-affinity rules').

A pod whose judging would take more than MAX_CHECKS label checks this cycle (a tenant's many distinct selectors over
100,000 pods; a selector's values count too, so one In of 100,000 values costs as much; for bound pods'
anti-affinity, one per label of the pod, term group it may match, and bound pod of a group it matches), or more
than its namespace's share of them (MAX_CHECKS_PER_NAMESPACE), is not judged: it stays demand. The share keeps one
tenant's costly selectors from spending the cycle's whole bound, after which every other tenant's pods that can never
start would count as demand again (and be preempted for).
"""

from __future__ import annotations

import itertools

# label-selector checks of placed pods per cycle, all pending pods together (on the 2-core dev box, 100,000 took
# 0.16 s and listing 100,000 bound pods for them 0.5 s, beside about 1 s for pods_as_jobs over them); a selector
# with a required label (matchLabels, In, Exists) checks only the pods with it. A check is one look-up per pair or
# expression (sets), and a selector costs its pairs and values before it is read: a tenant's pods whose In lists
# 60,000 values (1.2 MB each), checked as lists, took 14 s a cycle for 10 of them over 1,000 bound pods (20,000 of
# the 300,000 checks); 0.2 s now
MAX_CHECKS = 300_000
# one namespace's pods (a tenant's) spend at most this much of it: four tenants' pods must spend their whole share
# before a fifth's go unjudged
MAX_CHECKS_PER_NAMESPACE = MAX_CHECKS // 4
# a bound pod's term group naming more namespaces than this is filed as if it named every one (and each pending pod
# checks its namespace): filed under each, one pod's 100,000 names were as many entries
FILED_NAMESPACES = 64


def selector_matches(sel, labels: dict) -> bool:
    """A metav1.LabelSelector on `labels`, as the scheduler reads it: None selects nothing, an empty one everything;
    matchLabels and matchExpressions (In / NotIn / Exists / DoesNotExist) all hold. The apiserver refuses any other
    operator; one here selects nothing."""
    return sel is not None and _holds(_compiled(sel), labels)


def _compiled(sel) -> tuple:
    """A selector as (matchLabels pairs, (key, operator, values as a set) per expression): a check costs one look-up
    per pair and expression, not a scan of an expression's values (a tenant's In of 100,000 values)."""
    return (tuple((sel.match_labels or {}).items()),
            tuple((e.key, e.operator, frozenset(e.values or ())) for e in sel.match_expressions or []))


def _holds(compiled: tuple, labels: dict) -> bool:
    pairs, exprs = compiled
    for k, v in pairs:
        if labels.get(k) != v:
            return False
    for key, op, values in exprs:
        have = labels.get(key)
        if op == "In":
            ok = have is not None and have in values
        elif op == "NotIn":
            ok = have is None or have not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            ok = False
        if not ok:
            return False
    return True


def _size(terms: list) -> tuple[int, int]:
    """What reading the terms' selectors costs, in checks (their pairs and expressions' values: a tenant's pod may
    carry 100,000 values, 1.5 MB), and what one check of a row against all of them costs (pairs and expressions)."""
    size = per_row = 0
    for t in terms:
        sel = t.label_selector
        exprs = (sel.match_expressions or []) if sel is not None else []
        pairs = len(sel.match_labels or {}) if sel is not None else 0
        nsel = t.namespace_selector
        size += pairs + sum(1 + len(e.values or ()) for e in exprs) + len(t.namespaces or ()) + (
            len(nsel.match_labels or {}) + sum(1 + len(e.values or ()) for e in nsel.match_expressions or [])
            if nsel is not None else 0)
        per_row += max(1, pairs + len(exprs))
    return size, per_row


def _shown(sel) -> str:
    if sel is None:
        return "no pod"
    parts = [f"{k}={v}" for k, v in sorted((sel.match_labels or {}).items())]
    parts += [f"{e.key} {e.operator} {','.join(e.values or [])}".rstrip() for e in sel.match_expressions or []]
    return ", ".join(parts) or "any pod"


def shown_terms(terms: list) -> str:
    return " and ".join(f"({_shown(t.label_selector)} by {t.topology_key})" for t in terms)[:200]


# the label the apiserver sets on every namespace, to its name, and refuses to change (since 1.21)
NAME_LABEL = "kubernetes.io/metadata.name"


def _by_name(sel) -> frozenset | None | bool:
    """The namespaces a namespaceSelector selects where it reads NAME_LABEL alone (matchLabels, In, Exists,
    DoesNotExist): their names; None: every one; False: not known without the namespaces' labels (another label,
    or NotIn: every namespace but some)."""
    sets = [frozenset((v,)) for k, v in (sel.match_labels or {}).items() if k == NAME_LABEL]
    if len(sets) < len(sel.match_labels or {}):
        return False
    for e in sel.match_expressions or []:
        if e.key != NAME_LABEL or e.operator not in ("In", "Exists", "DoesNotExist"):
            return False
        if e.operator != "Exists":
            sets.append(frozenset(e.values or ()) if e.operator == "In" else frozenset())
    return frozenset.intersection(*sets) if sets else None


def _namespaces(term, own: str, surely: bool) -> frozenset | None:
    """The namespaces a term's pods are looked for in; None: every one. `surely`: only those it surely names (a
    namespaceSelector by other labels than NAME_LABEL selects namespaces by labels the view does not read: none more);
    else every namespace it may name. A selector by NAME_LABEL alone names its namespaces as surely as the list
    does: read as other labels, a bound pod's term selecting another tenant's namespace by its name kept that
    tenant's pods off every node while they counted as demand (held and preempted for)."""
    names = frozenset(term.namespaces or ())
    sel = term.namespace_selector
    if sel is None:
        return names or frozenset((own,))
    by_name = _by_name(sel)
    if by_name is not False:
        return None if by_name is None else names | by_name
    return names if surely else None


def required(pod, kind: str) -> list:
    aff = pod.spec.affinity
    part = getattr(aff, kind, None) if aff is not None else None
    return list((part.required_during_scheduling_ignored_during_execution if part is not None else None) or [])


class BoundPods:
    """The pods bound to nodes (not ended) as rows, and their label index, kept from cycle to cycle: the actuator holds
    one and each cycle brings it up to date with that cycle's pods (``synced``). The view's objects are replaced,
    never changed (informer.py), so a pod whose object is the one seen last time keeps its row; a new object (a new
    pod, or a changed one) is read, and the rows of the objects gone are dropped, from the index too. At 100,000 bound
    pods, reading every row took 0.46 s and the index 0.14-0.29 s each cycle; brought up to date, a cycle reads only
    the pods that changed. No row is read before a pending pod has pod affinity, and the index is built on the first
    selector with a required label (the pods with anti-affinity are kept apart: BoundAnti). The objects seen are held
    (so an id is never another object's while here): at most one snapshot's pods beyond the view's own, while pods
    change and no pending pod has pod affinity."""

    def __init__(self) -> None:
        self._reset()
        self.anti = BoundAnti()   # those with required anti-affinity, kept apart (read in any cycle with a pending pod)

    def _reset(self) -> None:
        self._seen: dict[int, object] = {}              # id -> the pod object, every pod of the last sync
        self.rows: dict[int, tuple] = {}                # id -> (namespace, labels, node name, priority, being deleted)
        self.nodes: dict[str, int] = {}                 # node name -> how many rows are on it
        # (label, value) -> its rows (dicts as ordered sets); None: not built
        self.by_pair: dict[tuple[str, str], dict[int, None]] | None = None
        self.by_key: dict[str, dict[int, None]] = {}    # label -> rows

    def synced(self, pods: list) -> BoundPods:
        """Up to date with `pods` (this cycle's): rows read for the objects not seen last time, dropped for those
        gone; read afresh where most are new (pods listed each cycle, not watched)."""
        now = {id(p): p for p in pods}
        gone = self._seen.keys() - now.keys()
        if len(gone) > len(self._seen) // 2:
            self._reset()
        else:
            for i in gone:
                self._drop(i)
        new = now.items() if not self._seen else ((i, now[i]) for i in now.keys() - self._seen.keys())
        rows, nodes, by_pair, by_key = self.rows, self.nodes, self.by_pair, self.by_key
        for i, p in new:
            node = p.spec.node_name
            if not node or (p.status and p.status.phase in ("Succeeded", "Failed")):
                continue
            labels = p.metadata.labels or {}
            rows[i] = (p.metadata.namespace, labels, node, p.spec.priority or 0,
                       p.metadata.deletion_timestamp is not None)
            nodes[node] = nodes.get(node, 0) + 1
            if by_pair is not None:
                for kv in labels.items():
                    by_pair.setdefault(kv, {})[i] = None
                    by_key.setdefault(kv[0], {})[i] = None
        self._seen = now
        return self

    def _drop(self, i: int) -> None:
        row = self.rows.pop(i, None)
        if row is None:
            return
        self.nodes[row[2]] -= 1
        if not self.nodes[row[2]]:
            del self.nodes[row[2]]
        if self.by_pair is not None:
            for kv in row[1].items():
                _unset(self.by_pair, kv, i)
                _unset(self.by_key, kv[0], i)

    def index(self) -> None:
        """The label index over the rows, once; kept up to date from then on."""
        if self.by_pair is not None:
            return
        by_pair: dict[tuple[str, str], dict[int, None]] = {}
        for i, row in self.rows.items():
            for kv in row[1].items():
                by_pair.setdefault(kv, {})[i] = None
        self.by_pair, self.by_key = by_pair, {}
        for (k, _), rows in by_pair.items():
            self.by_key.setdefault(k, {}).update(rows)


class BoundAnti:
    """The pods bound to nodes (not ended) with required pod anti-affinity, normally few: a pending pod a term of one
    matches is kept out of its node's domain of the term's key (kube-scheduler's InterPodAffinity filter on existing
    pods' anti-affinity). Any pending pod may be, with pod affinity of its own or not, so these are looked for in every
    cycle with a pending pod to judge: each cycle looks at the affinity of the pods the watched view marked as having
    pod anti-affinity (Snapshot.anti_pods; without the view, of every pod: 0.1 s a cycle at 100,000 pods), and reads
    only those whose objects are new since the last cycle, as BoundPods does (whose rows are read only for a pending
    pod with pod affinity). Their terms are grouped by (selector, namespaces, topologyKey), which a service's
    replicas share, and each group is filed under each namespace it names (None: every one) and a label a pod it
    matches must have (an anchor: a pair of matchLabels, else the key of an In or Exists; None where the selector
    requires none), so a pending pod looks only at the groups that may reach its namespace, filed under its labels
    or under none: a tenant's own-namespace terms, however many, cost another namespace's pods nothing (filed by
    label alone, one pod's 1,000 anchorless terms in its own namespace cost each of another tenant's pending pods
    2,000 checks of its share, past which its pods went unjudged: demand again, held and preempted for). A term
    reaching beyond its pod's namespace is refused in a tenant's namespace at admission where the shipped policies
    are installed (deploy/kubernetes/admission/pod-anti-affinity.yaml); the view does not rely on it."""

    def __init__(self) -> None:
        self._seen: dict[int, object] = {}             # id -> the pod object, every pod with it of the last sync
        self.pods: dict[int, tuple] = {}               # id -> (namespace, name, node, priority, being deleted, groups)
        self.groups: dict[tuple, dict[int, None]] = {}   # (selector compiled, namespaces or None, key) -> its pods
        # (a namespace the group names, or None: every one; anchor) -> its groups
        self.anchors: dict[tuple, dict[tuple, None]] = {}
        self.canon: dict[tuple, tuple] = {}              # group -> the one object of it the pods share

    def synced(self, pods: list) -> BoundAnti:
        """Up to date with `pods` (this cycle's, every one, or at least every one with pod anti-affinity: the watched
        view's Snapshot.anti_pods): the pods with anti-affinity read where new, dropped where gone."""
        now = {}
        for p in pods:
            spec = p.spec
            aff = spec.affinity
            if aff is not None and aff.pod_anti_affinity is not None and spec.node_name:
                now[id(p)] = p
        for i in self._seen.keys() - now.keys():
            self._drop(i)
        for i in now.keys() - self._seen.keys():
            self._file(i, now[i])
        self._seen = now
        return self

    def _file(self, i: int, p) -> None:
        """Pod `i`'s required anti-affinity terms into their groups (a term without a selector matches no pod)."""
        if p.status and p.status.phase in ("Succeeded", "Failed"):
            return
        ns = p.metadata.namespace
        groups = tuple(dict.fromkeys((_compiled(t.label_selector), _namespaces(t, ns, surely=True), t.topology_key)
                                     for t in required(p, "pod_anti_affinity")
                                     if t.label_selector is not None and t.topology_key))
        if not groups:
            return
        # a group already filed is held once: each pod's own copy of its terms' selectors, a service's 10,000
        # replicas' In of 1,000 values, held 10,000 sets of them beside the view's pods
        groups = tuple(self.canon.setdefault(g, g) for g in groups)
        self.pods[i] = (ns, p.metadata.name, p.spec.node_name, p.spec.priority or 0,
                        p.metadata.deletion_timestamp is not None, groups)
        for g in groups:
            if g not in self.groups:
                for where in _filed(g):
                    self.anchors.setdefault(where, {})[g] = None
            self.groups.setdefault(g, {})[i] = None

    def _drop(self, i: int) -> None:
        row = self.pods.pop(i, None)
        if row is None:
            return
        for g in row[5]:
            _unset(self.groups, g, i)
            if g not in self.groups:
                del self.canon[g]
                for where in _filed(g):
                    _unset(self.anchors, where, g)


def _filed(group: tuple) -> list[tuple]:
    """Where a term group is filed in BoundAnti.anchors: (namespace, anchor) for each namespace it names, or (None,
    anchor) where it names every one, or more than FILED_NAMESPACES (each pod it may match checks its namespace)."""
    anchor = _anchor(group[0])
    if group[1] is None or len(group[1]) > FILED_NAMESPACES:
        return [(None, anchor)]
    return [(n, anchor) for n in group[1]]


def _anchor(compiled: tuple):
    """A label a pod must have for the compiled selector to match it: ('pair', key, value) of matchLabels, else
    ('key', key) of an In or Exists; None where it requires none."""
    pairs, exprs = compiled
    if pairs:
        return ("pair", *pairs[0])
    return next((("key", key) for key, op, _ in exprs if op in ("In", "Exists")), None)


def _unset(index: dict, key, i) -> None:
    rows = index.get(key)
    if rows is not None:
        rows.pop(i, None)
        if not rows:
            del index[key]


class Placed:
    """The pods bound to the cluster's nodes (not ended) this cycle: the BoundPods on a node the cluster has now,
    each with its node's labels now (a node hold's label comes and goes). One per cycle, built on first use;
    ``checks`` counts the label checks made, up to MAX_CHECKS."""

    def __init__(self, bound: BoundPods, node_labels: dict[str, dict], pods: list,
                 anti_pods: list | None = None) -> None:
        self.bound = bound
        self.node_labels = node_labels
        self.pods = pods
        self.anti_pods = anti_pods   # those of `pods` with pod anti-affinity (the watched view's); None: look
        self.rows: dict[int, tuple] = {}
        self.off: set[int] = set()   # pods bound to a node the cluster does not have (deleted, its pods not yet)
        self._rows_read = self._anti_read = False   # bound brought up to date with `pods`: its rows, its anti-affinity
        self.checks = 0
        self.by_namespace: dict[str, int] = {}   # checks made for each namespace's pods (MAX_CHECKS_PER_NAMESPACE)
        self._cache: dict[tuple, list[int] | None] = {}
        self._passes: dict[tuple, list[bool]] = {}   # per node, for pods whose terms match the same rows
        self._kept: dict[tuple, dict | None] = {}     # kept_off's, per namespace, labels and priority

    def _read_rows(self) -> None:
        """The bound pods' rows, up to date with the cycle's pods: on first use (a pending pod with pod affinity)."""
        if self._rows_read:
            return
        self._rows_read = True
        bound = self.bound.synced(self.pods)
        self.rows = bound.rows
        self.off = {i for i, row in self.rows.items() if row[2] not in self.node_labels} \
            if bound.nodes.keys() - self.node_labels.keys() else set()

    def node_of(self, i: int) -> dict:
        """The labels of row `i`'s node."""
        return self.node_labels[self.rows[i][2]]

    def _candidates(self, sel):
        """The rows a selector may match: those with its rarest required label, else all (no index built)."""
        if not (sel.match_labels or any(e.operator in ("In", "Exists") for e in sel.match_expressions or [])):
            return [i for i in self.rows if i not in self.off] if self.off else self.rows.keys()
        self.bound.index()
        by_pair, by_key = self.bound.by_pair, self.bound.by_key
        options = [by_pair.get((k, v), {}) for k, v in (sel.match_labels or {}).items()]
        for e in sel.match_expressions or []:
            if e.operator == "In":
                options.append([i for v in e.values or [] for i in by_pair.get((e.key, v), {})])
            elif e.operator == "Exists":
                options.append(by_key.get(e.key, {}))
        if self.off:
            options = [[i for i in o if i not in self.off] for o in options]
        return min(options, key=len)

    def _spend(self, own: str, n: int) -> bool:
        """Count `n` checks for a pod of namespace `own`, or False (none counted) past the cycle's bound or the
        namespace's share of it."""
        mine = self.by_namespace.get(own, 0)
        if self.checks + n > MAX_CHECKS or mine + n > MAX_CHECKS_PER_NAMESPACE:
            return False
        self.checks += n
        self.by_namespace[own] = mine + n
        return True

    def matching(self, terms: list, own: str, surely: bool) -> list[int] | None:
        """The rows matching every term (selector and namespaces) for a pod of namespace `own`; None past the cycle's
        MAX_CHECKS or the namespace's share of it."""
        self._read_rows()
        size, per_row = _size(terms)
        if not self._spend(own, size):   # before any value is read: reading the key costs the terms' size
            return None
        key = (surely, own, tuple((_compiled(t.label_selector) if t.label_selector is not None else None,
                                   tuple(t.namespaces or ()),
                                   _compiled(t.namespace_selector) if t.namespace_selector is not None else None)
                                  for t in terms))
        if key in self._cache:
            return self._cache[key]
        if any(t.label_selector is None for t in terms):
            out: list[int] | None = []
        else:
            spaces = [_namespaces(t, own, surely) for t in terms]
            cands = self._candidates(terms[0].label_selector)
            if not self._spend(own, len(cands) * per_row):
                out = None
            else:
                sels = [_compiled(t.label_selector) for t in terms]
                out = [i for i in cands if all((ns is None or self.rows[i][0] in ns) and _holds(sel, self.rows[i][1])
                                               for sel, ns in zip(sels, spaces))]
        self._cache[key] = out
        return out


    def kept_off(self, pod) -> dict[tuple[str, str], tuple] | None:
        """The domains ((topologyKey, value)) a bound pod's required anti-affinity keeps `pod` out of, each with one
        such pod (its row and term group): a term of it matching the pod's labels and namespace, its node with the
        key (kube-scheduler's InterPodAffinity filter on existing pods' anti-affinity). Read strictly, as the pod's own
        anti-affinity: only namespaces the term surely names, not pods being deleted, and only pods kube-scheduler
        would not preempt for it. None: not judged (past the bound on checks). Pods of the same namespace, labels and
        priority share it this cycle: not to be changed."""
        anti = self.bound.anti
        if not self._anti_read:
            self._anti_read = True
            anti.synced(self.pods if self.anti_pods is None else self.anti_pods)
        if not anti.pods:
            return {}
        ns, labels = pod.metadata.namespace, pod.metadata.labels or {}
        anchors = anti.anchors
        looked = [(n, a) for n in (ns, None)
                  for a in (None, *(("pair", k, v) for k, v in labels.items()), *(("key", k) for k in labels))]
        if not self._spend(ns, len(looked)):
            return None
        mine = pod.spec.priority or 0
        never_preempts = (pod.spec.preemption_policy or "") == "Never"
        key = (ns, frozenset(labels.items()), None if never_preempts else mine)
        if key in self._kept:
            return self._kept[key]
        out: dict[tuple[str, str], tuple] | None = None
        # the term groups that may match: filed under the pod's namespace or every one, and a label it has or none
        if self._spend(ns, sum(len(anchors.get(a, ())) for a in looked)):
            groups = [g for a in looked for g in anchors.get(a, ())]
            if self._spend(ns, sum(max(1, len(g[0][0]) + len(g[0][1])) for g in groups)):
                hit = [g for g in groups if (g[1] is None or ns in g[1]) and _holds(g[0], labels)]
                if self._spend(ns, sum(len(anti.groups[g]) for g in hit)):
                    out = {}
                    for g in hit:
                        k = g[2]
                        for i in anti.groups[g]:
                            _, _, node, prio, going, _ = anti.pods[i]
                            node_lb = self.node_labels.get(node)   # None: a node the cluster does not have
                            if going or not (never_preempts or prio >= mine) or node_lb is None:
                                continue
                            v = node_lb.get(k)
                            if v is not None and (k, v) not in out:
                                out[(k, v)] = (i, g)
        self._kept[key] = out
        return out

    def shown_pod(self, i: int, group: tuple) -> str:
        """A bound pod with required anti-affinity and its term, for the log."""
        (pairs, exprs), _, key = group
        parts = [f"{k}={v}" for k, v in sorted(pairs)]
        parts += [f"{k} {op} {','.join(sorted(itertools.islice(values, 10)))}".rstrip() for k, op, values in exprs]
        ns, name = self.bound.anti.pods[i][:2]
        return f"{ns}/{name} ({', '.join(parts)[:100] or 'any pod'} by {key})"


def affinity_passes(pod, terms: list, placed: Placed, named: list) -> list[bool] | None:
    """Per node (`named`: (labels, name)): whether the pod's required pod affinity `terms` let it start there (module
    docstring); None: not judged. The list is shared with other pods of the same terms this cycle: not to be changed."""
    ns = pod.metadata.namespace
    near = placed.matching(terms, ns, surely=False)
    if near is None:
        return None
    own = all(selector_matches(t.label_selector, pod.metadata.labels or {})
              and (lambda s: s is None or ns in s)(_namespaces(t, ns, surely=False)) for t in terms)
    keys = tuple(t.topology_key for t in terms)
    done = ("near", id(near), keys, own)   # `near` is the cycle's (Placed.matching keeps it): its id is its own
    if done not in placed._passes:
        domains = set()
        for i in near:
            node_lb = placed.node_of(i)
            domains.update((k, node_lb[k]) for k in keys if k in node_lb)
        placed._passes[done] = [all(k in lb for k in keys) and (own or all((k, lb[k]) in domains for k in keys))
                                for lb, _ in named]
    return placed._passes[done]


def anti_affinity_passes(pod, terms: list, placed: Placed, named: list) -> list[bool] | None:
    """Per node: whether no pod the pending pod must keep away from (its required anti-affinity `terms`), and that
    kube-scheduler would not preempt for it, is bound in that node's domain of a term (module docstring); None: not
    judged. The list is shared with other pods of the same terms and priority this cycle: not to be changed."""
    ns = pod.metadata.namespace
    mine = pod.spec.priority or 0
    never_preempts = (pod.spec.preemption_policy or "") == "Never"
    aways = []
    for t in terms:
        away = placed.matching([t], ns, surely=True)
        if away is None:
            return None
        aways.append(away)
    keys = tuple(t.topology_key for t in terms)
    done = ("away", tuple(id(a) for a in aways), keys, None if never_preempts else mine)
    if done not in placed._passes:
        taken: set[tuple[str, str]] = set()
        for k, away in zip(keys, aways):
            for i in away:
                _, _, _, prio, going = placed.rows[i]
                if not going and (never_preempts or prio >= mine):
                    node_lb = placed.node_of(i)
                    if k in node_lb:
                        taken.add((k, node_lb[k]))
        placed._passes[done] = [not any(k in lb and (k, lb[k]) in taken for k in keys) for lb, _ in named]
    return placed._passes[done]


_NEAR = ("pod_affinity", "requires pod affinity {terms} (podAffinity, required) that none of the nodes it fits "
         "otherwise meets: no pod it must run beside is bound in their domain, and it does not match those terms "
         "itself (the scheduler's exception for a group's first pod)")
_AWAY = ("pod_anti_affinity", "requires pod anti-affinity {terms} (podAntiAffinity, required) that every node it fits "
         "otherwise breaks: a pod it must keep away from, at its priority or above (which kube-scheduler preempts none "
         "of for it), is bound in each one's domain, until those end")


_KEPT = ("is kept off every node it fits otherwise by bound pods' required anti-affinity (podAntiAffinity), at its "
         "priority or above (kube-scheduler preempts none of them for it), until those end, {n}: {pods}")


def kept_off_passes(pod, placed: Placed, named: list) -> tuple[list[bool], dict] | None:
    """Per node: whether no bound pod's required anti-affinity keeps the pod out of its domain (Placed.kept_off),
    with those domains; None: no such pod, or not judged. The list is shared with other pods of the same domains this
    cycle: not to be changed."""
    taken = placed.kept_off(pod)
    if not taken:
        return None
    done = ("kept", id(taken))   # `taken` is the cycle's (Placed.kept_off keeps it): its id is its own
    if done not in placed._passes:
        keys = {k for k, _ in taken}
        placed._passes[done] = [not any((k, lb.get(k)) in taken for k in keys) for lb, _ in named]
    return placed._passes[done], taken


def _kept_why(placed: Placed, taken: dict, ok: list[bool], named: list) -> str:
    """The message for a pod bound pods' anti-affinity keeps off every node of `ok`: the pods that do (a few)."""
    keys = sorted({k for k, _ in taken})
    who = set()
    for o, (lb, _) in zip(ok, named):
        k = next((k for k in keys if (k, lb.get(k)) in taken), None) if o else None
        if k is not None:
            who.add(placed.shown_pod(*taken[(k, lb[k])]))
    shown = sorted(who)
    return _KEPT.format(n=f"{len(shown)} pod{'s' if len(shown) > 1 else ''}", pods=", ".join(shown[:3]))


def why_not(pod, ok: list[bool], placed: Placed, named: list) -> tuple[list[bool], str | None]:
    """The nodes of `ok` (those the pod fits otherwise) its required pod affinity and anti-affinity leave, then the
    bound pods' required anti-affinity, and why none is left (None while one is, or where it is not judged)."""
    for (kind, said), judge in ((_NEAR, affinity_passes), (_AWAY, anti_affinity_passes)):
        terms = required(pod, kind)
        passes = judge(pod, terms, placed, named) if terms else None
        if passes is not None:
            ok = [o and p for o, p in zip(ok, passes)]
            if not any(ok):
                return ok, said.format(terms=shown_terms(terms))
    kept = kept_off_passes(pod, placed, named)
    if kept is not None:
        passes, taken = kept
        left = [o and p for o, p in zip(ok, passes)]
        if not any(left):
            return left, _kept_why(placed, taken, ok, named)
        ok = left
    return ok, None
