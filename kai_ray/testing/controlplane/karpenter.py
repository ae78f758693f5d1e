"""Karpenter with its KWOK cloud provider, run against a test control plane: a real node autoscaler for the tests.

Why Karpenter and why this way: a node autoscaler decides to buy a node from what the pods say (a pending pod whose
``PodScheduled`` condition is ``False``/``Unschedulable`` is demand), so only a real one proves what kai-ray tells it.
Karpenter's KWOK provider "buys" a node by creating a Node object annotated for KWOK; the control plane's KWOK then
makes it Ready, exactly as it does for the tests' own nodes. Everything comes from the pinned module at test time:
the binary (:mod:`kai_ray.testing.controlplane.build`, ``karpenter-kwok``), the CRDs (NodePool, NodeClaim,
NodeOverlay, CapacityBuffer and KWOKNodeClass, read from the module's files), nothing vendored.

What is set up (:meth:`Karpenter.start`):

- an instance-type file with one 8-GPU type (``INSTANCE_TYPES_FILE_PATH``; the provider's built-in list has no GPUs);
- a KWOKNodeClass, marked Ready by hand (the KWOK provider has no controller for its node class's status, and a
  NodePool whose class is not Ready provisions nothing);
- a NodePool whose nodes carry ``labels`` (so one scheduler under test sees exactly them), a GPU limit, and
  ``WhenEmpty`` consolidation: Karpenter removes a node kai-ray emptied, and never evicts kai-ray's pods to repack
  them (that is the scheduler's job);
- the process itself, leader election off, metrics and health on loopback (the build's one-line patch).

:meth:`Karpenter.release_nodes` hands back every node bought (between tests); :meth:`Karpenter.stop` stops the process
and removes what it made, finalizers included, leaving the cluster as it found it.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kai_ray.k8s.base.rest import Kube
from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import (
    GPU_RESOURCE,
    Component,
    ControlPlane,
    ControlPlaneError,
    free_port,
    wait_for,
)

KARPENTER_GROUP = "karpenter.sh"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE = "gpu-8x-h100"
ZONE = "test-zone-a"


def karpenter_crd_files() -> list[Path]:
    """The CRDs of the pinned Karpenter module: core's (pkg/apis/crds) and the KWOK provider's node class."""
    base = build.module_dir(build.KARPENTER_MODULE, build.KARPENTER_VERSION)
    files = sorted((base / "pkg" / "apis" / "crds").glob("*.yaml"))
    files.append(base / "kwok" / "apis" / "crds" / "karpenter.kwok.sh_kwoknodeclasses.yaml")
    missing = [str(f) for f in files if not f.is_file()]
    if missing or len(files) < 3:
        raise ControlPlaneError(f"Karpenter {build.KARPENTER_VERSION} module lacks CRD files: {', '.join(missing)}")
    return files


def instance_types(gpus: int, cpu: str, memory: str, price: float) -> list[dict[str, Any]]:
    """The KWOK provider's instance-type file format (kwok/examples/instance_types.json): one on-demand GPU type."""
    return [
        {
            "name": INSTANCE_TYPE,
            "offerings": [
                {
                    "Price": price,
                    "Available": True,
                    "Requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
                    ],
                }
            ],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {"cpu": cpu, "memory": memory, "pods": "110", GPU_RESOURCE: str(gpus)},
        }
    ]


@dataclass
class Karpenter:
    """One Karpenter (KWOK provider) and its NodePool on ``plane``; a context manager."""

    plane: ControlPlane
    labels: dict[str, str]  # put on every node it creates (the scheduler under test selects them)
    name: str = "kai-ray-gpu"
    gpus: int = 8
    cpu: str = "64"
    memory: str = "512Gi"
    price: float = 10.0  # per node-hour, for the figures
    gpu_limit: int = 64  # the NodePool's limit: a runaway test buys at most this many GPUs
    consolidate_after: str = "5s"
    component: Component | None = field(default=None, init=False)
    health_port: int = field(default=0, init=False)
    metrics_port: int = field(default=0, init=False)
    kube: Kube = field(init=False)

    def __post_init__(self) -> None:
        self.kube = Kube(self.plane.api_client(pool_size=4))

    def __enter__(self) -> Karpenter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- setup ------------------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> Karpenter:
        binary = build.ensure("karpenter-kwok")
        self.plane.apply_crds(karpenter_crd_files())
        assert self.plane.workdir is not None
        types_file = self.plane.workdir / f"karpenter-{self.name}-instance-types.json"
        types_file.write_text(json.dumps(instance_types(self.gpus, self.cpu, self.memory, self.price)))
        self._create_node_class()
        self.kube.create(NODEPOOLS, self.node_pool_body())
        self.health_port, self.metrics_port = free_port(), free_port()
        env = {
            **self.plane.env(),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(self.metrics_port),
            "HEALTH_PROBE_PORT": str(self.health_port),
            "INSTANCE_TYPES_FILE_PATH": str(types_file),
            "LOG_LEVEL": "info",
            # A test's gang arrives at once: a short batch window buys its nodes within seconds.
            "BATCH_IDLE_DURATION": "1s",
            "BATCH_MAX_DURATION": "3s",
        }
        comp = self.plane._spawn("karpenter", [str(binary)], env=env)
        self.component = comp

        def ready() -> bool:
            if not comp.alive():
                raise comp.failure("exited during startup")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                    return bool(resp.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        try:
            wait_for("Karpenter to report /readyz", ready, timeout, interval=0.3)
            wait_for("the NodePool to be Ready", self._pool_ready, timeout, interval=0.3)
        except Exception:
            self.stop()
            raise
        return self

    def _create_node_class(self) -> None:
        self.kube.create(
            NODECLASSES,
            {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": self.name}},
        )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": now}
        self.kube.merge_patch(
            f"{NODECLASSES}/{self.name}/status", {"status": {"conditions": [{**ready, "observedGeneration": 1}]}}
        )

    def node_pool_body(self) -> dict[str, Any]:
        requirements = [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]
        return {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": self.name},
            "spec": {
                "template": {
                    "metadata": {
                        "labels": {
                            **self.labels,
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.count": str(self.gpus),
                            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                            "nvidia.com/gpu.memory": "81920",
                        }
                    },
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": self.name},
                        "requirements": requirements,
                        "expireAfter": "Never",
                    },
                },
                "limits": {GPU_RESOURCE: str(self.gpu_limit)},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": self.consolidate_after},
            },
        }

    def _pool_ready(self) -> bool:
        pool = self.kube.get(f"{NODEPOOLS}/{self.name}")
        conds = {c.get("type"): c.get("status") for c in (pool.get("status") or {}).get("conditions") or []}
        return conds.get("Ready") == "True"

    # --- what it did ------------------------------------------------------------------------------------------

    def node_claims(self) -> list[dict[str, Any]]:
        """This NodePool's NodeClaims (one per node it bought, while the node lives)."""
        items = self.kube.get(NODECLAIMS, labelSelector=f"{NODEPOOL_LABEL}={self.name}")
        return list(items.get("items") or [])

    def claims_created(self) -> int:
        """NodeClaims this Karpenter has created since it started (its ``karpenter_nodeclaims_created_total``
        counter): every node bought, however short-lived, which a listing taken now and then could miss."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("karpenter_nodeclaims_created_total{") and f'nodepool="{self.name}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def nodes(self) -> list[dict[str, Any]]:
        items = self.kube.get("/api/v1/nodes", labelSelector=f"{NODEPOOL_LABEL}={self.name}")
        return list(items.get("items") or [])

    # --- teardown ---------------------------------------------------------------------------------------------

    def set_gpu_limit(self, gpus: int) -> None:
        """Change the NodePool's GPU limit (0: Karpenter buys nothing, as a cloud out of capacity would)."""
        self.kube.merge_patch(f"{NODEPOOLS}/{self.name}", {"spec": {"limits": {GPU_RESOURCE: str(gpus)}}})

    def release_nodes(self, timeout: float = 10.0) -> None:
        """Hand back every node bought (delete the NodeClaims: Karpenter drains and removes them), so the next test
        starts from none without waiting for consolidation; what Karpenter has not removed within ``timeout`` (a
        drain waiting on pods of a namespace not yet cleared) is removed directly. The pods on them go first (grace
        0), as the test's namespace would take them: a drain would wait for each."""
        for node in self._safe(self.nodes):
            pods = self.kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={node['metadata']['name']}")
            for pod in pods.get("items") or []:
                meta = pod["metadata"]
                with contextlib.suppress(Exception):
                    self.kube.delete(
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", {"gracePeriodSeconds": 0}
                    )
        for claim in self._safe(self.node_claims):
            with contextlib.suppress(Exception):
                self.kube.delete(f"{NODECLAIMS}/{claim['metadata']['name']}")
        try:
            wait_for("Karpenter to remove its nodes", lambda: not self.node_claims() and not self.nodes(), timeout, 0.5)
        except ControlPlaneError:
            self._remove(
                [
                    *((NODECLAIMS, o["metadata"]["name"]) for o in self._safe(self.node_claims)),
                    *(("/api/v1/nodes", o["metadata"]["name"]) for o in self._safe(self.nodes)),
                ]
            )

    def stop(self) -> None:
        """Stop Karpenter, then remove what it made (NodePool, NodeClaims, nodes, node class) directly: the test
        cluster is left as found without waiting for Karpenter's own termination flow."""
        with contextlib.suppress(Exception):
            self.kube.delete(f"{NODEPOOLS}/{self.name}")
        if self.component is not None:
            self.component.stop()
            self.plane.components.pop("karpenter", None)
            self.component = None
        self._remove(
            [
                *((NODECLAIMS, o["metadata"]["name"]) for o in self._safe(self.node_claims)),
                *(("/api/v1/nodes", o["metadata"]["name"]) for o in self._safe(self.nodes)),
                (NODEPOOLS, self.name),
                (NODECLASSES, self.name),
            ]
        )
        self.kube.close()

    def _remove(self, objects: list[tuple[str, str]]) -> None:
        """Delete objects whose Karpenter finalizers no one will honour (Karpenter stopped or stuck)."""
        for path, name in objects:
            with contextlib.suppress(Exception):
                self.kube.merge_patch(f"{path}/{name}", {"metadata": {"finalizers": None}})
            with contextlib.suppress(Exception):
                self.kube.delete(f"{path}/{name}")

    @staticmethod
    def _safe(fn: Any) -> list[dict[str, Any]]:
        try:
            return list(fn())
        except Exception:
            return []
