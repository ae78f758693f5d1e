"""Node-hours a node autoscaler buys for pods quota will not admit, with and without the queue-admission gate.

Why measured and not argued: without the gate, every gang kai-ray leaves pending because its queue is over quota is
marked ``Unschedulable`` (as KAI marks it), and a real Karpenter buys nodes for it that stay idle until quota frees;
with the gate those pods are invisible to it. This runs one small scripted day on the real stack (a test control
plane, KWOK, Karpenter's KWOK provider, kai-ray's podgrouper with its webhook and scheduler in-process), once per mode,
and integrates the time each node Karpenter bought existed, and existed with no pod bound to it ("idle"), in scaled
hours (``--hour`` real seconds per hour), from the first arrival until the last gang ends; idle time also holds the
seconds a node takes to arrive and, during the day, to be consolidated once empty, which Karpenter spends in real
seconds (a larger ``--hour`` makes them weigh less).

The day: a department queue with a 16-GPU limit over two teams; one static 8-GPU node. Team a trains on 16 GPUs from
0h for 8h (so one node is bought, legitimately); team b's sweeps (8 GPUs each) arrive at 3h and 5h while a holds the
whole limit and wait until a ends; a 4-hour evaluation of a at 12h, and at 13h a 16-GPU sweep of b that waits until 16h.

``python -m kai_ray.bench.nodehours [--hour 5]`` prints one line per mode (docs/autoscaling.md has the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path
from kai_ray.k8s.podgrouping import admission
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.scheduling.operator import build_scheduler
from kai_ray.testing.controlplane.harness import NODE_BATCH_LABEL, ControlPlane, free_port, our_crd_dir, wait_for
from kai_ray.testing.controlplane.karpenter import Karpenter
from kai_ray.testing.inprocess import operator_config
from kai_ray.testing.testbed import queue_body


@dataclass(frozen=True)
class Arrival:
    hour: float
    queue: str  # a | b
    name: str
    pods: int
    gpus: int
    hours: float  # how long it runs once bound


DAY = (
    Arrival(0, "a", "train", 2, 8, 8),
    Arrival(3, "b", "sweep1", 1, 8, 3),
    Arrival(5, "b", "sweep2", 1, 8, 3),
    Arrival(12, "a", "eval", 1, 8, 4),
    Arrival(13, "b", "sweep3", 2, 8, 4),
)


@dataclass
class NodeClock:
    first: float
    last: float
    idle: float = 0.0


@dataclass
class Run:
    mode: str
    hour: float
    nodes: dict[str, NodeClock] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)  # gang -> hours from arrival to bound

    def line(self) -> str:
        total = sum(n.last - n.first for n in self.nodes.values()) / self.hour
        idle = sum(n.idle for n in self.nodes.values()) / self.hour
        waits = ", ".join(f"{k} {v:.1f}h" for k, v in self.waits.items())
        return (
            f"gating {self.mode:>6}: {len(self.nodes)} nodes bought, {total:.1f} node-hours, {idle:.1f} idle "
            f"node-hours; waits: {waits}"
        )


def _pod(name: str, group: str, queue: str, gpus: int, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {c.QUEUE_LABEL: queue, c.SKIP_PODGROUPER: "true"},
            "annotations": {c.PODGROUP_ANNOTATION: group},
        },
        "spec": {
            "schedulerName": c.SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(selector),
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/never-pulled:0",
                    "resources": {"limits": {c.GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }


def run_day(plane: ControlPlane, karpenter: Karpenter, mode: str, hour: float) -> Run:
    kube = Kube(plane.api_client(pool_size=8))
    ns = plane.new_namespace(prefix=f"nodehours-{mode}")
    tag = uuid.uuid4().hex[:4]
    made_queues = [f"dept-{tag}", f"a-{tag}", f"b-{tag}"]
    kube.create(queues_path(), queue_body(made_queues[0], gpu_limit=16))
    for q in made_queues[1:]:
        body = queue_body(q, parent=made_queues[0])
        body["metadata"]["labels"] = {c.QUEUE_ADMISSION_GATING_LABEL: "true"}
        kube.create(queues_path(), body)
    static = plane.create_gpu_nodes(1, gpus=8, labels=dict(karpenter.labels))
    port = free_port()
    grouper = PodgrouperOperator(
        operator_config(
            plane,
            ns,
            queue_admission_gating=mode,
            webhook_port=port,
            webhook_url=f"https://127.0.0.1:{port}{admission.GATE_PATH}",
        )
    ).start()
    scheduler = build_scheduler(
        operator_config(plane, ns, node_selector=karpenter.labels, queue_admission_gating=mode)
    ).start()
    result = Run(mode, hour)
    try:
        wait_for("the operators to lead", lambda: grouper.is_leader() and scheduler.is_leader(), 60)
        if mode != "off":
            probe = _pod("probe", "probe", made_queues[2], 1, karpenter.labels)
            wait_for(
                "the webhook to gate pods",
                lambda: (
                    c.QUEUE_ADMISSION_GATE
                    in [
                        g["name"]
                        for g in kube.request("POST", pods_path(ns), query={"dryRun": "All"}, body=probe)["spec"].get(
                            "schedulingGates"
                        )
                        or []
                    ]
                ),
                60,
                interval=0.5,
            )
        _play(kube, ns, karpenter, result, {"a": made_queues[1], "b": made_queues[2]}, hour)
    finally:
        scheduler.stop()
        grouper.stop()
        with contextlib.suppress(ApiError):
            kube.delete(f"{admission.CONFIGS_PATH}/{admission.CONFIG_NAME}")
        plane.clear_namespace(ns)
        karpenter.release_nodes()
        plane.delete_nodes(static)
        for q in reversed(made_queues):
            with contextlib.suppress(ApiError):
                kube.delete(queues_path(q))
        wait_for("Karpenter's nodes to go", lambda: not karpenter.nodes(), 180, interval=0.5)
        kube.close()
    return result


def _play(kube: Kube, ns: str, karpenter: Karpenter, run: Run, queues: dict[str, str], hour: float) -> None:
    t0 = time.monotonic()
    started: dict[str, float] = {}
    done: set[str] = set()
    pending = list(DAY)
    stop = threading.Event()

    def now_h() -> float:
        return (time.monotonic() - t0) / hour

    last = time.monotonic()
    while len(done) < len(DAY):
        for arr in [a for a in pending if a.hour <= now_h()]:
            pending.remove(arr)
            body = {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": arr.name},
                "spec": {"minMember": arr.pods, "queue": queues[arr.queue], "priorityClassName": "train"},
            }
            kube.create(podgroups_path(ns), body)
            for i in range(arr.pods):
                pod = _pod(f"{arr.name}-{i}", arr.name, queues[arr.queue], arr.gpus, karpenter.labels)
                kube.create(pods_path(ns), pod)
        pods = kube.get(pods_path(ns))["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        busy_nodes = {p["spec"]["nodeName"] for p in live if p["spec"].get("nodeName")}
        for arr in DAY:
            mine = [p for p in pods if p["metadata"]["name"].startswith(f"{arr.name}-")]
            if arr.name not in started and len(mine) == arr.pods and all(p["spec"].get("nodeName") for p in mine):
                started[arr.name] = now_h()
                run.waits[arr.name] = started[arr.name] - arr.hour
            if arr.name in started and arr.name not in done and now_h() - started[arr.name] >= arr.hours:
                done.add(arr.name)
                for p in mine:
                    with contextlib.suppress(ApiError):
                        kube.delete(pods_path(ns, p["metadata"]["name"]), {"gracePeriodSeconds": 0})
        t = time.monotonic()
        for node in karpenter.nodes():
            name = node["metadata"]["name"]
            clock = run.nodes.setdefault(name, NodeClock(t, t))
            if name not in busy_nodes:
                clock.idle += t - max(clock.last, last)
            clock.last = t
        last = t
        stop.wait(0.2)
    # Counted until the last gang ends: Karpenter's consolidation runs in real seconds (tens of them, whatever
    # --hour says), so the nodes it removes after the day would weigh by the scale, not by the policy.


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hour", type=float, default=5.0, help="real seconds per scripted hour")
    args = parser.parse_args(argv)
    with ControlPlane(crds=[our_crd_dir()]) as plane:
        kube = Kube(plane.api_client())
        kube.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "train"}, "value": 50},
        )
        kube.close()
        with Karpenter(plane, labels={NODE_BATCH_LABEL: f"karpenter-{uuid.uuid4().hex[:6]}"}) as karpenter:
            for mode in ("off", "queues"):
                print(run_day(plane, karpenter, mode, args.hour).line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
