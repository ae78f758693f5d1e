"""The API permissions each operator uses, as RBAC rules: the Helm chart's ClusterRoles are checked against these.

Kept next to the code that makes the calls so a new call and its permission change together. The Lease rules are
needed only in the lease namespace (a Role there is enough).
"""

from __future__ import annotations

from typing import Any

Rule = dict[str, Any]

LEASE_RULES: list[Rule] = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update"],
    },
]

EVENT_RULES: list[Rule] = [
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]

SCHEDULER_RULES: list[Rule] = [
    # delete: eviction-mode; patch: the queue-admission gate removed (ungate.py)
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["pods/binding", "pods/eviction"], "verbs": ["create"]},
    # PodScheduled=False/Unschedulable on pods it cannot place (the node autoscaler's signal; podcondition.py)
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list", "watch"]},
    # upstream gangs: Kubernetes PodGroups and their Workloads (read only)
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups", "workloads"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["scheduling.run.ai"], "resources": ["podgroups", "queues"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["scheduling.run.ai"], "resources": ["podgroups"], "verbs": ["patch"]},  # kai.scheduler/* stamps
    {"apiGroups": ["scheduling.run.ai"], "resources": ["podgroups/status", "queues/status"], "verbs": ["get", "patch"]},
    # elastic reclaim: shrink worker groups, suspend and resume owners; owners' specs for resume and headroom probes
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayclusters", "rayjobs", "rayservices"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    # DRA: devices and claims into the snapshot; a claim's allocation and reservedFor written before binding
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["deviceclasses", "resourceslices", "resourceclaimtemplates", "resourceclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update"]},
    *EVENT_RULES,
]

PODGROUPER_RULES: list[Rule] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {
        "apiGroups": ["scheduling.run.ai"],
        "resources": ["podgroups"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayclusters", "rayjobs", "rayservices"],
        "verbs": ["get", "list", "watch"],
    },
    # owners between a pod and its Ray top owner (the RayJob submitter's Job: KubeRay's Jobs are watched) and other
    # controllers' pods
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets"], "verbs": ["get"]},
    # a Ray object's priority class: a Warning Event when the cluster does not define it
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get"]},
    *EVENT_RULES,
]

# --upstream-gangs (chart: podgrouper.upstreamGangs): the podgrouper writes upstream Workloads and PodGroups and
# registers its admission webhook (the gang's PriorityClass for its pods: PODGROUPER_RULES already reads it) ...
PODGROUPER_UPSTREAM_RULES: list[Rule] = [
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups", "workloads"], "verbs": ["get", "create", "patch"]},
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations"],
        "verbs": ["get", "create", "update"],
    },
]
# --queue-admission-gating (chart: queueAdmissionGating): the podgrouper reads whether a queue opted in, and registers
# the webhook (the same registration and certificate as above)
PODGROUPER_GATING_RULES: list[Rule] = [
    {"apiGroups": ["scheduling.run.ai"], "resources": ["queues"], "verbs": ["get"]},
    PODGROUPER_UPSTREAM_RULES[-1],
]
# ... and keeps the webhook's certificate in a Secret of its own namespace (a Role there is enough)
WEBHOOK_TLS_RULES: list[Rule] = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]}]

# KAI-coexistence: the podgrouper marks Ray objects with kai.scheduler/skip-podgrouper (an annotation patch)
PODGROUPER_COEXISTENCE_RULES: list[Rule] = [
    {"apiGroups": ["ray.io"], "resources": ["rayclusters", "rayjobs", "rayservices"], "verbs": ["patch"]},
]

RULES: dict[str, list[Rule]] = {"scheduler": SCHEDULER_RULES, "podgrouper": PODGROUPER_RULES}

MODES = ("standalone", "kai-coexistence")


def rules_for(
    mode: str, upstream_gangs: bool = False, gating: bool = False, cert_manager: bool = False
) -> dict[str, list[Rule]]:
    """Per operator that runs in ``mode`` (the Helm chart's ``mode`` value), the cluster-wide rules it needs;
    ``upstream_gangs``: the podgrouper also writes upstream gangs (``podgrouper.upstreamGangs``); ``gating``: it
    gates new pods (``queueAdmissionGating`` not off); ``cert_manager``: its webhook's certificate comes from
    cert-manager and the chart registers the webhook (``webhook.certManager.enabled``), so it writes neither."""
    if mode == "standalone":
        rules = dict(RULES)
    elif mode == "kai-coexistence":
        rules = {"podgrouper": [*PODGROUPER_RULES, *PODGROUPER_COEXISTENCE_RULES]}
    else:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    if upstream_gangs:
        rules["podgrouper"] = [*rules["podgrouper"], *PODGROUPER_UPSTREAM_RULES]
    if gating:
        rules["podgrouper"] = [*rules["podgrouper"], *PODGROUPER_GATING_RULES]
    if cert_manager:
        registration = PODGROUPER_UPSTREAM_RULES[-1]
        rules["podgrouper"] = [r for r in rules["podgrouper"] if r is not registration]
    return rules
