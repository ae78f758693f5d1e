"""How the operators are started: the kopf entrypoints (``kopf run operators/*.py``) and ``kai-ray operator ...``
(the Helm chart's command), each scheduling a pod end to end on the real API server with KWOK nodes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kopf.testing import KopfRunner

from kai_ray.k8s.base.rbac import LEASE_RULES, RULES
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.testing.controlplane.harness import ControlPlane, free_port
from tests.k8s.helpers import bound, condition, make_gang, pod_body, pods, wait_until

ROOT = Path(__file__).resolve().parents[2]
NodePool = Callable[..., tuple[list[str], dict[str, str]]]


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""  # not listening yet


def _probes(port: int) -> dict[str, Any]:
    status, text = _http(f"http://127.0.0.1:{port}/healthz")
    result: dict[str, Any] = json.loads(text) if status == 200 else {}
    return result


def test_kopf_entrypoints_group_and_schedule_a_pod(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: NodePool,
    priority_classes: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    env = {
        "KAI_RAY_KUBECONFIG": str(control_plane.kubeconfig_path),
        "KAI_RAY_NAMESPACES": namespace,
        "KAI_RAY_NODE_SELECTOR": ",".join(f"{k}={v}" for k, v in selector.items()),
        "KAI_RAY_LEADER_ELECT": "false",
        "KAI_RAY_METRICS_PORT": "0",
        "KAI_RAY_HEALTH_PORT": "0",
        "KAI_RAY_SCHEDULE_PERIOD": "0.5s",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    port = free_port()
    args = [
        "run",
        "--standalone",
        "--all-namespaces",
        f"--liveness=http://127.0.0.1:{port}/healthz",
        str(ROOT / "operators" / "podgrouper.py"),
        str(ROOT / "operators" / "scheduler.py"),
    ]
    with KopfRunner(args, registry=kopf.OperatorRegistry(), timeout=60) as runner:
        probes = wait_until(
            "both engines to report synced on /healthz",
            lambda: (
                lambda p: p if p.get("scheduler", {}).get("synced") and p.get("podgrouper", {}).get("synced") else None
            )(_probes(port)),
            60,
            interval=0.3,
        )
        assert probes["scheduler"]["leader"] and probes["podgrouper"]["leader"]
        kube.create(pods_path(namespace), pod_body("solo", 2, labels={"kai.scheduler/queue": team}))
        wait_until("the pod to be grouped and bound", lambda: bound(kube, namespace, ["solo"]), 60)
        stamped = wait_until(  # written after the binding may be: the scheduler does not need it for a bare pod
            "the pod to be stamped",
            lambda: (pods(kube, namespace)["solo"]["metadata"].get("annotations") or {}).get("pod-group-name"),
        )
        assert stamped.startswith("pg-solo-")
    assert runner.exit_code == 0, runner.output


def test_cli_operator_serves_health_metrics_and_stops_on_sigterm(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: NodePool,
    priority_classes: Any,
) -> None:
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    metrics, health = free_port(), free_port()
    cmd = [
        sys.executable,
        "-m",
        "kai_ray",
        "operator",
        "scheduler",
        "--kubeconfig",
        str(control_plane.kubeconfig_path),
        "--namespace",
        namespace,
        "--node-selector",
        ",".join(f"{k}={v}" for k, v in selector.items()),
        "--lease-namespace",
        namespace,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "500ms",
        "--bind-address",
        "127.0.0.1",
        "--metrics-port",
        str(metrics),
        "--health-port",
        str(health),
        "--placement-strategy",
        "spread",
        "--schedule-period",
        "500ms",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ), cwd=ROOT)
    try:
        wait_until(
            "/healthz to report a synced leader",
            lambda: (lambda r: r[0] == 200 and '"leader": true' in r[1])(_http(f"http://127.0.0.1:{health}/healthz")),
            60,
            interval=0.2,
        )
        names = make_gang(kube, namespace, "gang", pods=2, gpus=1, queue=team)
        wait_until("the gang to be bound", lambda: len(bound(kube, namespace, names)) == 2, 30)
        status, text = wait_until(  # a binding is counted when its answer is back, maybe after the watch shows it
            "both bindings to be counted",
            lambda: (lambda r: r if 'kai_ray_binds_total{result="ok"} 2.0' in r[1] else None)(
                _http(f"http://127.0.0.1:{metrics}/metrics")
            ),
        )
        assert status == 200
        assert "kai_ray_scheduler_cycles_total" in text and "kai_ray_is_leader" in text
        lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/kai-ray-scheduler")
        assert lease["spec"]["holderIdentity"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0, out.decode()[-3000:]
    lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/kai-ray-scheduler")
    assert not lease["spec"].get("holderIdentity"), "a graceful stop hands the Lease back"


def test_operators_work_with_exactly_the_rbac_rules_they_declare(
    control_plane: ControlPlane,
    kube: Kube,
    namespace: str,
    queues: Any,
    node_pool: NodePool,
    priority_classes: Any,
    run_scheduler: Any,
    run_podgrouper: Any,
    tmp_path: Path,
) -> None:
    """A ServiceAccount granted only ``kai_ray.k8s.base.rbac.RULES`` (what the Helm chart grants) runs both operators."""
    _, selector = node_pool(1, gpus=8)
    queues("dept")
    team = queues("team", parent="dept")
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "kai-ray"}})
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": "kai-ray", "namespace": namespace}]
    made: list[str] = []
    try:
        for kind, rules in RULES.items():
            name = f"{namespace}-{kind}"
            kube.create(f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": rules})
            made.append(f"{rbac}/clusterroles/{name}")
            kube.create(
                f"{rbac}/clusterrolebindings",
                {
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": subject,
                },
            )
            made.append(f"{rbac}/clusterrolebindings/{name}")
        kube.create(f"{rbac}/namespaces/{namespace}/roles", {"metadata": {"name": "leases"}, "rules": LEASE_RULES})
        kube.create(
            f"{rbac}/namespaces/{namespace}/rolebindings",
            {
                "metadata": {"name": "leases"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
                "subjects": subject,
            },
        )
        token = kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/kai-ray/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )["status"]["token"]
        config = yaml.safe_load(control_plane.kubeconfig_path.read_text())
        config["users"][0]["user"] = {"token": token}
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))

        limited = Kube.connect(str(kubeconfig), pool_size=2)
        try:
            limited.get(f"/api/v1/namespaces/{namespace}/secrets")
            raise AssertionError("the operators' identity must not read Secrets")
        except ApiError as exc:
            assert exc.status == 403
        finally:
            limited.close()

        run_podgrouper(kubeconfig=str(kubeconfig), leader_elect=True)
        run_scheduler(node_selector=selector, kubeconfig=str(kubeconfig), leader_elect=True)
        kube.create(pods_path(namespace), pod_body("solo", 1, labels={"kai.scheduler/queue": team}))
        byo = {"kai.scheduler/skip-podgrouper": "true"}  # a bring-your-own PodGroup, as KAI requires
        names = make_gang(kube, namespace, "gang", pods=2, gpus=2, queue=team, labels=byo)
        wait_until("both operators to do their job", lambda: len(bound(kube, namespace, ["solo", *names])) == 3, 60)
        wait_until(
            "the scheduler's Events to be written",
            lambda: any(
                e["reason"] == "Scheduled" for e in kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
            ),
        )

        def gang_written() -> dict[str, Any] | None:
            pg: dict[str, Any] = kube.get(podgroups_path(namespace, "gang"))
            stamped = "kai.scheduler/last-start-timestamp" in pg["metadata"].get("annotations", {})
            return pg if stamped and condition(pg, "Scheduled") else None

        pg = wait_until("the PodGroup's status and annotation to be written", gang_written)
        assert (condition(pg, "Scheduled") or {}).get("status") == "True"
        wait_until(
            "the Queue's status to be written",
            lambda: (kube.get(queues_path(team)).get("status") or {}).get("allocated"),
        )
    finally:
        for path in made:
            with contextlib.suppress(ApiError):
                kube.delete(path)
