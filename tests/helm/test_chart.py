"""The Helm chart with the real `helm` (built from its Go module): lint, render, schema, and what it grants."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.testing.controlplane import build

CHART = Path(__file__).resolve().parents[2] / "helm" / "kai-ray"
NON_DEFAULT = [
    "--set",
    "mode=kai-coexistence",
    "--set",
    "schedulerName=my-scheduler",
    "--set",
    "queueLabelKey=runai/queue",
    "--set",
    "podgrouper.defaultPriority.RayService=build",
    "--set",
    "priorityClasses.create=false",
    "--set",
    "defaultQueues.create=false",
    "--set",
    "watchNamespaces={team-a,team-b}",
]


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.ensure("helm")


IMAGE = ("--set", "image.repository=registry.example.com/kai-ray")  # required: the chart has no default image


def run_helm(helm: Path, *args: str, image: bool = True) -> subprocess.CompletedProcess[str]:
    extra = IMAGE if image and args and args[0] in ("template", "install", "upgrade") else ()
    if args and args[0] == "template":  # offline, Helm assumes its own client's Kubernetes, older than kubeVersion
        extra = (*extra, f"--kube-version={build.K8S_VERSION}")
    return subprocess.run([str(helm), *args, *extra], capture_output=True, text=True, timeout=120)


def render(helm: Path, *extra: str) -> list[dict[str, Any]]:
    out = run_helm(helm, "template", "rel", str(CHART), "--namespace", "kai-system", *extra)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def args_of(deploy: dict[str, Any]) -> list[str]:
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    return [*container["command"], *container["args"]]


def test_lint_default_and_non_default(helm):
    assert run_helm(helm, "lint", str(CHART)).returncode == 0
    lint = run_helm(helm, "lint", str(CHART), *NON_DEFAULT)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_default_render(helm):
    docs = render(helm)
    deploys = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    assert set(deploys) == {"rel-kai-ray-podgrouper", "rel-kai-ray-scheduler"}
    sched = args_of(deploys["rel-kai-ray-scheduler"])
    assert sched[:3] == ["kai-ray", "operator", "scheduler"]
    assert "--leader-elect" in sched and "--lease-namespace=kai-system" in sched
    assert "--scheduler-name=kai-scheduler" in sched and "--placement-strategy=binpack" in sched
    assert "--queue-priority-reclaim" not in sched
    grouper = args_of(deploys["rel-kai-ray-podgrouper"])
    assert "--default-priority=RayService=inference" in grouper
    for d in deploys.values():
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["resources"]["requests"]
        assert d["spec"]["template"]["spec"]["serviceAccountName"] == "rel-kai-ray"
    classes = {d["metadata"]["name"]: d["value"] for d in by_kind(docs, "PriorityClass")}
    assert classes == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    queues = {d["metadata"]["name"]: d for d in by_kind(docs, "Queue")}
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert queues["default-queue"]["spec"]["resources"]["gpu"]["limit"] == -1
    assert by_kind(docs, "Service")[0]["spec"]["ports"][0]["port"] == 8080


def test_values_reach_the_flags(helm):
    docs = render(
        helm,
        "--set",
        "scheduler.queuePriorityReclaim=true",
        "--set",
        "scheduler.placementStrategy=spread",
        "--set",
        "scheduler.preemptionDelay=30s",
        "--set",
        "leaderElection.enabled=false",
    )
    sched = args_of(next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("scheduler")))
    assert {
        "--queue-priority-reclaim",
        "--placement-strategy=spread",
        "--preemption-delay=30s",
        "--no-leader-elect",
    } <= set(sched)
    assert not any(d["kind"] == "Role" for d in docs)


def test_kai_coexistence_mode_runs_only_the_podgrouper(helm):
    docs = render(helm, *NON_DEFAULT)
    deploys = by_kind(docs, "Deployment")
    assert [d["metadata"]["name"] for d in deploys] == ["rel-kai-ray-podgrouper"]
    grouper = args_of(deploys[0])
    assert "--kai-coexistence" in grouper and "--scheduler-name=my-scheduler" in grouper
    assert "--namespace=team-a" in grouper and "--namespace=team-b" in grouper
    assert "--default-priority=RayService=build" in grouper
    assert not by_kind(docs, "PriorityClass") and not by_kind(docs, "Queue")
    rules = by_kind(docs, "ClusterRole")[0]["rules"]
    resources = {r for rule in rules for r in rule["resources"]}
    assert "pods/binding" not in resources and "pods/eviction" not in resources


def test_rbac_is_least_privilege(helm):
    rules = by_kind(render(helm), "ClusterRole")[0]["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("", "pods/binding", "create") in granted
    assert not any(r in ("secrets", "configmaps") for _, r, _ in granted)
    assert not any(r == "nodes" and v not in ("get", "list", "watch") for _, r, v in granted)
    assert not any(v in ("*", "escalate", "bind", "impersonate") for _, _, v in granted)
    assert not any(g == "ray.io" and v == "delete" for g, _, v in granted)


@pytest.mark.parametrize(
    "bad,field",
    [
        ("mode=sideways", "mode"),
        ("scheduler.placementStrategy=random", "placementStrategy"),
        ("scheduler.preemptionDelay=soon", "preemptionDelay"),
    ],
)
def test_schema_rejects_bad_values(helm, bad, field):
    out = run_helm(helm, "template", "rel", str(CHART), "--set", bad)
    assert out.returncode != 0
    assert field in out.stderr


def test_kai_coexistence_creates_no_classes_or_queues_unless_asked(helm):
    docs = render(helm, "--set", "mode=kai-coexistence")
    assert not by_kind(docs, "PriorityClass") and not by_kind(docs, "Queue")
    asked = render(
        helm,
        "--set",
        "mode=kai-coexistence",
        "--set",
        "priorityClasses.create=true",
        "--set",
        "defaultQueues.create=true",
    )
    assert len(by_kind(asked, "PriorityClass")) == 4 and len(by_kind(asked, "Queue")) == 2
    standalone_off = render(helm, "--set", "priorityClasses.create=false", "--set", "defaultQueues.create=false")
    assert not by_kind(standalone_off, "PriorityClass") and not by_kind(standalone_off, "Queue")


def test_node_pools_get_one_scheduler_deployment_each(helm):
    """KAI's SchedulingShards: the main scheduler takes what carries no node-pool label, each pool has its own
    Deployment, Lease and placement strategy, and Deployments select only their own pods."""
    docs = render(
        helm,
        "--set",
        "scheduler.nodePools[0].name=a100",
        "--set",
        "scheduler.nodePools[0].placementStrategy=fgd",
        "--set",
        "scheduler.nodePools[1].name=h100",
    )
    schedulers = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment") if "scheduler" in args_of(d)}
    assert set(schedulers) == {"rel-kai-ray-scheduler", "rel-kai-ray-scheduler-a100", "rel-kai-ray-scheduler-h100"}
    main, a100, h100 = (args_of(schedulers[n]) for n in sorted(schedulers))
    assert "--node-pool=default" in main and "--lease-name=rel-kai-ray-scheduler" in main
    assert "--node-pool=a100" in a100 and "--placement-strategy=fgd" in a100
    assert "--lease-name=rel-kai-ray-scheduler-a100" in a100
    assert "--node-pool=h100" in h100 and "--placement-strategy=binpack" in h100
    assert "--node-pool-label-key=kai.scheduler/node-pool" in h100
    for name in ("a100", "h100"):
        deploy = schedulers[f"rel-kai-ray-scheduler-{name}"]
        assert deploy["spec"]["selector"]["matchLabels"]["kai-ray.io/node-pool"] == name
        assert deploy["spec"]["template"]["metadata"]["labels"]["kai-ray.io/node-pool"] == name
    plain = {d["metadata"]["name"] for d in by_kind(render(helm), "Deployment")}
    assert "rel-kai-ray-scheduler" in plain and not any(n.startswith("rel-kai-ray-scheduler-") for n in plain)
    out = run_helm(helm, "template", "rel", str(CHART), "--set", "scheduler.nodePools[0].name=Bad_Name")
    assert out.returncode != 0 and "nodePools" in out.stderr
