"""The cluster services around the real node: kube-controller-manager (a Deployment's pod comes back), kube-proxy (a
Service ClusterIP answers from a pod) and CoreDNS (a pod resolves ``<svc>.<ns>.svc.cluster.local``).

These pods name the node directly (``spec.nodeName``): they test the cluster's own machinery, not a scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kai_ray.k8s.base.rest import Kube, pods_path
from kai_ray.testing.controlplane.realnode import NODE_NAME, RealNode
from tests.k8s.helpers import wait_until
from tests.realnode.helpers import logs, phase, running_containers

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

MakePod = Callable[..., dict[str, Any]]


def _deployment(name: str, image: str, script: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": NODE_NAME,
                    "terminationGracePeriodSeconds": 1,
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script],
                            "ports": [{"containerPort": 8080}],
                            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                        }
                    ],
                },
            },
        },
    }


def _pods(kube: Kube, ns: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get(pods_path(ns), labelSelector=f"app={app}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _running_uid(kube: Kube, ns: str, app: str) -> str | None:
    for p in _pods(kube, ns, app):
        if running_containers(kube, ns, p["metadata"]["name"]):
            return str(p["metadata"]["uid"])
    return None


WEB = "mkdir -p /www && echo hello-from-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"


def test_a_deployments_pod_comes_back_after_it_is_deleted(
    real_node: RealNode, kube: Kube, namespace: str, busybox: str
) -> None:
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("web", busybox, WEB, {"app": "web"}))
    first = wait_until("the Deployment's pod to run", lambda: _running_uid(kube, namespace, "web"), 180, 0.3)
    name = next(p["metadata"]["name"] for p in _pods(kube, namespace, "web") if p["metadata"]["uid"] == first)
    kube.delete(pods_path(namespace, name))

    def replaced() -> str | None:
        uid = _running_uid(kube, namespace, "web")
        return uid if uid and uid != first else None

    wait_until("the ReplicaSet to bring a new pod up", replaced, 180, 0.3)


def test_a_service_answers_on_its_cluster_ip_and_by_its_dns_name(
    real_node: RealNode, kube: Kube, namespace: str, busybox: str, make_pod: MakePod
) -> None:
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", _deployment("web", busybox, WEB, {"app": "web"}))
    svc = kube.create(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    cluster_ip = svc["spec"]["clusterIP"]

    def endpoint_ready() -> bool:  # written by kube-controller-manager's EndpointSlice controller
        slices = kube.get(
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            labelSelector="kubernetes.io/service-name=web",
        )["items"]
        return any((e.get("conditions") or {}).get("ready") for s in slices for e in s.get("endpoints") or [])

    wait_until("the Service's endpoint to be ready", endpoint_ready, 180, 0.3)

    fqdn = f"web.{namespace}.svc.cluster.local"
    # busybox's nc, not its wget (which segfaults here on an HTTP answer); retried while kube-proxy catches up
    get = "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 $1 80 | tail -n 1"
    script = (
        f"get() {{ {get}; }}; "
        f'for i in $(seq 60); do out=$(get {cluster_ip}); [ -n "$out" ] && break; sleep 1; done; echo "ip $out"; '
        f"nslookup {fqdn} | sed -n 's/^Address[^:]*: /dns /p'; "
        f'for i in $(seq 60); do out=$(get {fqdn}); [ -n "$out" ] && break; sleep 1; done; echo "name $out"'
    )
    kube.create(pods_path(namespace), make_pod("client", script, scheduler=None))
    wait_until("the client to finish", lambda: phase(kube, namespace, "client") in ("Succeeded", "Failed"), 240, 0.3)
    out = logs(kube, namespace, "client")
    lines = out.splitlines()
    assert any(line.startswith("ip hello-from-web-") for line in lines), f"{cluster_ip} did not answer: {out!r}"
    assert f"dns {cluster_ip}" in lines, f"{fqdn} did not resolve to {cluster_ip}: {out!r}"
    assert any(line.startswith("name hello-from-web-") for line in lines), f"{fqdn} did not answer: {out!r}"


def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(
    real_node: RealNode, kube: Kube, namespace: str, make_pod: MakePod
) -> None:
    script = "nc -w 5 kubernetes.default.svc.cluster.local 443 </dev/null && echo connected"
    kube.create(pods_path(namespace), make_pod("api", script, scheduler=None))
    wait_until("the probe pod to finish", lambda: phase(kube, namespace, "api") in ("Succeeded", "Failed"), 180, 0.3)
    out = logs(kube, namespace, "api")
    assert "connected" in out, f"the kubernetes Service did not lead to the apiserver: {out!r}"
