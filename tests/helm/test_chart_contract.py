"""The chart and the code agree: every argument list the chart renders is accepted by the real ``kai-ray operator``
parser (parsed into an OperatorConfig, nothing started), and the chart's RBAC grants exactly the rules the operators
of the rendered mode declare in ``kai_ray/k8s/base/rbac.py`` (no fewer: they would fail; no more: least privilege)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.cli import CliError
from kai_ray.cli.operator import parse_args
from kai_ray.k8s.base.rbac import LEASE_RULES, WEBHOOK_TLS_RULES, rules_for
from kai_ray.k8s.config import OperatorConfig
from tests.helm.test_chart import NON_DEFAULT, args_of, by_kind, helm, render  # noqa: F401

VALUE_SETS = {
    "default": [],
    "non-default": NON_DEFAULT,
    "tuned": [
        "--set", "scheduler.queuePriorityReclaim=true",
        "--set", "scheduler.placementStrategy=spread",
        "--set", "scheduler.preemptionDelay=1m30s",
        "--set", "scheduler.schedulePeriod=500ms",
        "--set", "scheduler.evictionMode=delete",
        "--set", "leaderElection.enabled=false",
        "--set", "podgrouper.defaultPriority.RayJob=build-preemptible",
        "--set", "watchNamespaces={ml}",
        "--set", "scheduler.elasticReclaim=false",
        "--set", "scheduler.suspendKinds={RayJob,RayCluster}",
        "--set", "scheduler.drainDeadline=45s",
        "--set", "scheduler.headroomInterval=0s",
    ],
    "coexistence-with-election": ["--set", "mode=kai-coexistence"],
    "upstream-gangs": ["--set", "podgrouper.upstreamGangs=true", "--set", "podgrouper.webhookPort=9555"],
    "gating": ["--set", "queueAdmissionGating=queues", "--set", "podgrouper.webhookPort=9555"],
    "gating-coexistence": ["--set", "mode=kai-coexistence", "--set", "queueAdmissionGating=all"],
    "gating-cert-manager": ["--set", "queueAdmissionGating=queues", "--set", "webhook.certManager.enabled=true"],
}  # fmt: skip

Triple = tuple[str, str, str]


def _triples(rules: list[dict[str, Any]]) -> set[Triple]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _configs(docs: list[dict[str, Any]]) -> dict[str, OperatorConfig]:
    out = {}
    for deploy in by_kind(docs, "Deployment"):
        argv = args_of(deploy)
        assert argv[:2] == ["kai-ray", "operator"], argv
        out[argv[2]] = parse_args(argv[2], argv[3:])
    return out


def _mode(values: list[str]) -> str:
    return "kai-coexistence" if "mode=kai-coexistence" in values else "standalone"


def _upstream(values: list[str]) -> bool:
    return "podgrouper.upstreamGangs=true" in values


def _gating(values: list[str]) -> str:
    return next((v.split("=", 1)[1] for v in values if v.startswith("queueAdmissionGating=")), "off")


def _webhook(values: list[str]) -> bool:
    return _upstream(values) or _gating(values) != "off"


def _cert_manager(values: list[str]) -> bool:
    return _webhook(values) and "webhook.certManager.enabled=true" in values


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_the_real_parser_accepts_every_rendered_argument_list(helm, values):  # noqa: F811
    configs = _configs(render(helm, *values))
    mode = _mode(values)
    assert set(configs) == ({"podgrouper"} if mode == "kai-coexistence" else {"podgrouper", "scheduler"})
    grouper = configs["podgrouper"]
    assert grouper.kai_coexistence == (mode == "kai-coexistence")
    services = {s["metadata"]["name"]: s for s in by_kind(render(helm, *values), "Service")}
    assert grouper.upstream_gangs == _upstream(values)
    assert grouper.queue_admission_gating == _gating(values)
    if "scheduler" in configs:
        assert configs["scheduler"].queue_admission_gating == _gating(values)
        assert configs["scheduler"].reservation_ttl == 600.0
    if _webhook(values) and "podgrouper.webhookPort=9555" in values:  # the Service fronts the podgrouper's port
        (deploy,) = [d for d in by_kind(render(helm, *values), "Deployment") if "podgrouper" in d["metadata"]["name"]]
        ports = {p["name"]: p["containerPort"] for p in deploy["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert (grouper.webhook_port, ports["webhook"]) == (9555, 9555)
        assert services[grouper.webhook_service]["spec"]["ports"] == [
            {"name": "webhook", "port": 443, "targetPort": "webhook"}
        ]
    elif not _webhook(values):
        assert not any(name.endswith("-podgrouper-webhook") for name in services)
    assert grouper.default_priority["RayService"] == ("build" if values is NON_DEFAULT else "inference")
    if values is NON_DEFAULT:
        assert grouper.scheduler_name == "my-scheduler" and grouper.queue_label_key == "runai/queue"
        assert grouper.namespaces == ("team-a", "team-b")
    if values is VALUE_SETS["tuned"]:
        sched = configs["scheduler"]
        assert (sched.placement_strategy, sched.preemption_delay, sched.schedule_period) == ("spread", 90.0, 0.5)
        assert sched.queue_priority_reclaim and sched.eviction_mode == "delete"
        assert not sched.leader_elect and not grouper.leader_elect
        assert grouper.default_priority["RayJob"] == "build-preemptible" and grouper.namespaces == ("ml",)
        assert not sched.elastic_reclaim and sched.suspend_kinds == ("RayJob", "RayCluster")
        assert (sched.drain_deadline, sched.headroom_interval) == (45.0, 0.0)
    elif "scheduler" in configs:  # Ray-aware reclaim is on with the chart's defaults
        sched = configs["scheduler"]
        assert sched.elastic_reclaim and sched.suspend_kinds == ("RayJob",) and sched.headroom_interval > 0
    for config in configs.values():
        if config.leader_elect:
            assert config.lease_namespace == "kai-system"
    leases = {c.lease(kind)[0] for kind, c in configs.items() if c.leader_elect}
    assert len(leases) == len([c for c in configs.values() if c.leader_elect]), "each operator its own Lease"


def test_parser_refuses_what_the_chart_must_not_render() -> None:
    with pytest.raises(CliError, match="--kai-coexistence"):
        parse_args("scheduler", ["--kai-coexistence"])
    with pytest.raises(CliError, match="--default-priority"):
        parse_args("podgrouper", ["--default-priority=RayJob"])
    with pytest.raises(CliError, match="--no-such-flag"):
        parse_args("podgrouper", ["--no-such-flag"])


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_chart_rbac_is_exactly_what_the_operators_declare(helm, values):  # noqa: F811
    docs = render(helm, *values)
    mode = _mode(values)
    rules = rules_for(mode, _upstream(values), _gating(values) != "off", _cert_manager(values))
    needed = set().union(*(_triples(r) for r in rules.values()))
    (role,) = by_kind(docs, "ClusterRole")
    granted = _triples(role["rules"])
    assert needed - granted == set(), f"the chart does not grant what the operators call: {needed - granted}"
    assert granted - needed == set(), f"the chart grants more than the operators call: {granted - needed}"
    if mode == "standalone":  # elastic reclaim: shrink, suspend and resume Ray objects
        assert {("ray.io", r, "patch") for r in ("rayclusters", "rayjobs", "rayservices")} <= granted
        assert ("", "pods/binding", "create") in granted
    else:
        assert not any(r in ("pods/binding", "pods/eviction", "nodes") for _, r, _ in granted)
    configs = _configs(docs)
    electing = [c for c in configs.values() if c.leader_elect]
    roles = by_kind(docs, "Role")
    tls = [r for r in roles if r["metadata"]["name"].endswith("-webhook-tls")]
    if _webhook(values) and not _cert_manager(values):  # with cert-manager the kubelet mounts its Secret
        (tls_role,) = tls
        assert tls_role["metadata"]["namespace"] == "kai-system"
        assert _triples(tls_role["rules"]) == _triples(WEBHOOK_TLS_RULES)
    else:
        assert tls == []
    roles = [r for r in roles if r not in tls]
    if electing:
        (lease_role,) = roles
        assert lease_role["metadata"]["namespace"] == electing[0].lease_namespace
        assert _triples(lease_role["rules"]) == _triples(LEASE_RULES)
    else:
        assert roles == []
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    accounts = {d["spec"]["template"]["spec"]["serviceAccountName"] for d in by_kind(docs, "Deployment")}
    assert {s["name"] for s in binding["subjects"]} == accounts
