"""The headline's figures, read from what the workloads leave behind (``examples/headline/train_v2.py`` and
``train.py`` write ``progress.json``), so a benchmark on the host needs no Kubernetes API to follow training.

The pure functions here are shared by the tests with real Ray processes and by ``kai-ray bench headline``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kai_ray.bench.e2e import install_defaults
from kai_ray.k8s.base.rest import ApiError, Kube, podgroups_path, pods_path, queues_path, ray_path
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.podgrouping.operator import PodgrouperOperator
from kai_ray.k8s.scheduling.operator import SchedulerOperator, build_scheduler
from kai_ray.testing.testbed import queue_body

PROGRESS = "progress.json"


def read_progress(directory: Path) -> dict[str, Any] | None:
    """The training's ``progress.json`` (written atomically by the script), or None before its first write."""
    try:
        loaded = json.loads((directory / PROGRESS).read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def read_steps(log: str) -> list[int]:
    """The step numbers of the per-step JSON lines in a driver's output, in order (other lines ignored)."""
    steps = []
    for line in log.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "event" not in rec and isinstance(rec.get("step"), int):
            steps.append(rec["step"])
    return steps


def seconds_below(history: Sequence[Sequence[float]], full: int, start: float, end: float) -> float:
    """Wall seconds in ``[start, end]`` during which the worker count (a list of ``[time, workers]`` change points,
    as ``progress.json`` keeps it) was below ``full``. Before the first point the count is taken as full."""
    total = 0.0
    points = sorted((float(t), int(n)) for t, n in history)
    current = full
    at = start
    for t, n in points:
        if t > end:
            break
        if t > at:
            if current < full:
                total += t - at
            at = t
        current = n
    if current < full and end > at:
        total += end - at
    return round(total, 3)


def longest_pause(times: Sequence[float], since: float) -> float:
    """The longest gap between consecutive new steps seen at or after ``since`` (0 with fewer than two)."""
    seen = [t for t in times if t >= since]
    return round(max((b - a for a, b in itertools.pairwise(seen)), default=0.0), 1)


def steps_went_back(steps: Sequence[int]) -> int:
    """How many times a step number was not above the one before it (0 when the counter only moved forward)."""
    return sum(1 for a, b in itertools.pairwise(steps) if b <= a)


# --- the story on a real node (kubelet + containerd, KubeRay creating real Ray pods) ---------------------------------

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "headline"
SEMANTICS = ("kai-ray", "kai")
TRAINERS = ("train-v2", "loop")
PRIORITY_CLASSES = {"train": 50, "build": 100, "inference": 125}
JOB = "headline-train"
SERVICE = "headline-serve"


@dataclass
class StoryConfig:
    """One run of the headline on a real node. ``semantics="kai"`` is KAI's way of evicting (delete the victim pods,
    no Ray-aware shrink, no suspend) on the same podgrouper and core, for contrast. ``trainer`` picks the training
    script: ``train-v2`` (Ray Train v2, which takes the drain's preemption notice for a just-in-time checkpoint; what
    ``rayjob-training-cpu.yaml`` runs) or ``loop`` (the hand-written actor loop ``train.py``, which only checkpoints
    every few steps)."""

    semantics: str = "kai-ray"
    trainer: str = "train-v2"
    workers: int = 3
    timeout: float = 900.0
    compute_seconds: float = 0.3
    suspend_story: bool = True


@dataclass
class StoryFigures:
    semantics: str
    trainer: str
    serve_first_answer_seconds: float | None = None
    serve_answered_via: str = ""
    served_through_service: bool = False
    training_steps_lost: int = 0
    training_step_went_back: int = 0  # across the shrink (a restart's redone steps are counted per phase below)
    seconds_below_full_size: float | None = None
    grow_back_seconds: float | None = None
    pods_recreated_by_kuberay: int = 0
    shrink_drained: bool = False
    suspend_to_resume_seconds: float | None = None
    resumed_from_step: int | None = None
    preemption_notices: int = 0  # notices the training took (Ray Train v2's get_preemption_info)
    jit_checkpoints: int = 0
    # Steps redone per phase (a restart from a checkpoint older than the last step): Ray Train v2 restarts its worker
    # group at a shrink (from the just-in-time checkpoint), when it grows (from the latest checkpoint) and on resume.
    steps_redone_at_shrink: int = 0
    steps_redone_at_grow_back: int = 0
    steps_redone_at_resume: int = 0
    suspend_notice_taken: bool = False
    suspend_drains: dict[str, str] = field(default_factory=dict)  # pod -> what the GCS said to the suspend's drain
    # The longest time without a new step from the service's arrival until training runs on fewer workers again
    # (sampled every 0.5 s): Ray Train v2 makes no step from the notice until its restart; the loop only waits on the
    # dying worker's call.
    longest_pause_at_shrink_seconds: float | None = None
    progress_points: list[dict[str, Any]] = field(default_factory=list)  # progress.json at each phase, for reading
    job_states: list[str] = field(default_factory=list)
    training_failed: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _wait(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def example_manifest(
    name: str, namespace: str, queue: str, image: str, checkpoints: Path | None = None
) -> dict[str, Any]:
    """The example's Ray CR with the test's namespace, queue and image (and the checkpoint hostPath under a
    directory the run owns instead of /var/lib/kai-ray-headline)."""
    (doc,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d and d["kind"].startswith("Ray")]
    text = json.dumps(doc).replace('"kai-ray-ray"', json.dumps(image))
    if checkpoints is not None:
        text = text.replace('"/var/lib/kai-ray-headline"', json.dumps(str(checkpoints)))
    out: dict[str, Any] = json.loads(text)
    out["metadata"]["namespace"] = namespace
    out["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return out


def training_entrypoint(cfg: StoryConfig) -> str:
    """The RayJob's command line for the chosen trainer: the example's arguments, a step count the story never
    reaches and the configured seconds per step."""
    common = f"--min-workers 1 --max-workers {cfg.workers} --steps 1000000"
    seconds = cfg.compute_seconds
    if cfg.trainer == "loop":
        return f"python /apps/train.py --checkpoint-dir /checkpoints/{JOB} {common} --compute-seconds {seconds}"
    return f"python /apps/train_v2.py --storage /checkpoints/{JOB} {common} --step-seconds {seconds}"


def _rbac(namespace: str) -> list[tuple[str, dict[str, Any]]]:
    base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    out = []
    for doc in yaml.safe_load_all((EXAMPLES / "rayjob-training-cpu.yaml").read_text()):
        if doc and doc["kind"] in ("Role", "RoleBinding"):
            doc["metadata"]["namespace"] = namespace
            for subject in doc.get("subjects", []):
                subject["name"] = f"system:serviceaccounts:{namespace}"
            out.append((f"{base}/{doc['kind'].lower()}s", doc))
    return out


class Story:
    """Runs the headline against a started real node (``kai_ray.testing.controlplane.realnode.RealNode``): kai-ray's
    podgrouper and scheduler in this process, KubeRay's operator as a host process (reaching Ray's dashboards through
    the apiserver's service proxy), Ray pods from the lane's Ray image, training progress read from the hostPath
    checkpoint directory."""

    def __init__(self, node: Any, kube: Kube, namespace: str, cfg: StoryConfig, say: Callable[[str], None]) -> None:
        if cfg.semantics not in SEMANTICS:
            raise ValueError(f"semantics: {cfg.semantics!r} is not one of {', '.join(SEMANTICS)}")
        if cfg.trainer not in TRAINERS:
            raise ValueError(f"trainer: {cfg.trainer!r} is not one of {', '.join(TRAINERS)}")
        self.node, self.kube, self.ns, self.cfg, self.say = node, kube, namespace, cfg, say
        self.fig = StoryFigures(cfg.semantics, cfg.trainer)
        self.ckpt_root = Path(tempfile.mkdtemp(prefix="kai-ray-headline-"))
        self.ckpt = self.ckpt_root / JOB
        self.operators: list[Any] = []
        self.scheduler: SchedulerOperator | None = None  # its reclaim records say what the suspend's drains got
        self.steps: list[int] = []
        self.step_times: list[float] = []  # monotonic time each sampled step was first seen
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    # -- setup ----------------------------------------------------------------------------------------------------

    def setup(self) -> None:
        """Everything but the workloads (queues, ConfigMaps, the hook's RBAC, the filler pod, kai-ray's operators and
        KubeRay's), for a test that runs its own RayJob on the same stage; :meth:`close` takes it down."""
        self._setup()

    def _setup(self) -> None:

        plane, kube, ns, cfg = self.node.plane, self.kube, self.ns, self.cfg
        plane.install_crds(kuberay=True)
        self.ray_image = self.node.load_image("ray")
        busybox = self.node.load_image("busybox")
        install_defaults(kube, PRIORITY_CLASSES)
        gpus = int(self.node.gpus)
        filler = gpus - cfg.workers
        self.q_training = f"{ns}-training"
        kube.create(queues_path(), queue_body(f"{ns}-ml-platform", gpu_quota=gpus + 1))
        kube.create(queues_path(), queue_body(self.q_training, gpu_quota=cfg.workers + 1, parent=f"{ns}-ml-platform"))
        kube.create(queues_path(), queue_body(f"{ns}-other", gpu_quota=max(filler, 0), parent=f"{ns}-ml-platform"))
        for path, doc in _rbac(ns):
            kube.create(path, doc)
        configmaps = {
            "headline-train": ("train_v2.py", "train.py", "sitecustomize.py"),
            "headline-serve": ("serve_app.py", "sitecustomize.py"),
        }
        for cm, files in configmaps.items():
            data = {f: (EXAMPLES / f).read_text() for f in files}
            kube.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": cm}, "data": data})
        common: dict[str, Any] = {
            "kubeconfig": str(plane.kubeconfig_path),
            "namespaces": (ns,),
            "node_selector": {"kubernetes.io/hostname": self.node.name},
            "leader_elect": False,
            "metrics_port": 0,
            "health_port": 0,
            "bind_address": "127.0.0.1",
            "schedule_period": 0.5,
        }
        if cfg.semantics == "kai":
            common.update(eviction_mode="delete", elastic_reclaim=False, suspend_kinds=(), drain_deadline=0.0)
        podgrouper = PodgrouperOperator(OperatorConfig(**common)).start()
        self.operators.append(podgrouper)
        self.scheduler = build_scheduler(OperatorConfig(**common)).start()
        self.operators.append(self.scheduler)
        plane.start_kuberay_operator(batch_scheduler=None, watch_namespace=ns, extra_args=["--use-kubernetes-proxy"])
        if filler > 0:  # the rest of the node's GPUs, held by another team within its quota
            kube.create(pods_path(ns), _busybox_pod("filler", busybox, filler, f"{ns}-other", "build"))
        self.busybox = busybox

    # -- observation ----------------------------------------------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        return read_progress(self.ckpt) or {}

    def _sample(self) -> None:

        while not self._stop.is_set():
            step = self.progress().get("step")
            if isinstance(step, int) and (not self.steps or step != self.steps[-1]):
                self.steps.append(step)
                self.step_times.append(time.monotonic())
            try:
                job = self.kube.get(ray_path("RayJob", self.ns, JOB))
                state = (job.get("status") or {}).get("jobDeploymentStatus")
                if state and (not self.fig.job_states or self.fig.job_states[-1] != state):
                    self.fig.job_states.append(state)
            except ApiError:
                pass
            self._stop.wait(0.5)

    def ray_pods(self, kind: str, name: str, node_type: str) -> list[dict[str, Any]]:
        """The ``node_type`` pods of the RayClusters that the RayJob or RayService ``name`` controls, by their
        ``ray.io/cluster`` label: KubeRay 1.6 labels such a RayCluster with ``ray.io/originated-from-cr-name`` but
        not its pods, so a selector on that label finds none."""
        clusters = {
            rc["metadata"]["name"]
            for rc in self.kube.get(ray_path("RayCluster", self.ns))["items"]
            if any(r.get("kind") == kind and r.get("name") == name for r in rc["metadata"].get("ownerReferences") or [])
        }
        items = self.kube.get(pods_path(self.ns), labelSelector=f"ray.io/node-type={node_type}")["items"]
        return [p for p in items if (p["metadata"].get("labels") or {}).get("ray.io/cluster") in clusters]

    def worker_pods(self) -> dict[str, dict[str, Any]]:

        return {p["metadata"]["uid"]: p for p in self.ray_pods("RayJob", JOB, "worker")}

    def _answer(self, service_only: bool = False) -> str | None:
        """POST one request to the service: through its Service's ClusterIP (kube-proxy), else straight to the head
        pod's Serve proxy. Returns the route that answered with predictions, or None."""
        routes = []
        with contextlib.suppress(ApiError):
            svc = self.kube.get(f"/api/v1/namespaces/{self.ns}/services/{SERVICE}-serve-svc")
            routes.append((f"Service {SERVICE}-serve-svc", svc["spec"].get("clusterIP")))
        with contextlib.suppress(ApiError):
            for pod in [] if service_only else self.ray_pods("RayService", SERVICE, "head"):
                routes.append((f"head pod {pod['metadata']['name']}", (pod.get("status") or {}).get("podIP")))
        body = json.dumps({"features": [5.1, 3.5, 1.4, 0.2]}).encode()
        for via, ip in routes:
            if not ip or ip == "None":
                continue
            req = urllib.request.Request(f"http://{ip}:8000/", data=body, headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    if "predictions" in json.loads(resp.read()):
                        return f"{via} ({ip}:8000)"
            except (OSError, ValueError):
                continue
        return None

    # -- the story ------------------------------------------------------------------------------------------------

    def run(self) -> StoryFigures:

        cfg, kube, ns, fig, t = self.cfg, self.kube, self.ns, self.fig, self.cfg.timeout
        self._setup()
        job = example_manifest("rayjob-training-cpu.yaml", ns, self.q_training, self.ray_image, self.ckpt_root)
        job["spec"]["entrypoint"] = training_entrypoint(cfg)
        kube.create(ray_path("RayJob", ns), job)
        self._sampler = threading.Thread(target=self._sample, name="headline-sampler", daemon=True)
        self._sampler.start()

        # (a) training fills the node
        full = _wait(f"training on {cfg.workers} workers", self._full_or_failed, t)
        self.say(f"training runs on {full['workers']} workers at step {full['step']}")
        before = set(self.worker_pods())
        lost = self._point("full")

        # (b) the RayService arrives; (c) it answers
        svc = example_manifest("rayservice-cpu.yaml", ns, self.q_training, self.ray_image)
        t_serve, wall_serve = time.monotonic(), time.time()
        kube.create(ray_path("RayService", ns), svc)
        fig.serve_answered_via = _wait("the service's first answer", self._answer, t, 0.5)
        fig.serve_first_answer_seconds = round(time.monotonic() - t_serve, 1)
        self.say(f"the service answered {fig.serve_first_answer_seconds}s after creation ({fig.serve_answered_via})")
        fig.served_through_service = _wait("an answer through the Service", lambda: self._answer(True), t) is not None
        shrunk = _wait(
            "training on fewer workers", lambda: (p := self.progress()).get("workers", 0) < cfg.workers and p, t
        )
        self.say(f"training kept going on {shrunk['workers']} workers at step {shrunk['step']}")
        shrink = self._shrink_record()
        fig.shrink_drained = bool(shrink) and set((shrink.get("drain") or {}).values()) == {"accepted"}
        _wait("a few more steps on fewer workers", lambda: self.progress().get("step", 0) >= shrunk["step"] + 3, t)
        fig.pods_recreated_by_kuberay = len(set(self.worker_pods()) - before)
        fig.steps_redone_at_shrink = (after_shrink := self._point("shrunk")) - lost
        fig.training_step_went_back = steps_went_back(self.steps)
        fig.longest_pause_at_shrink_seconds = longest_pause(self.step_times, t_serve)

        # (d) the service goes away; training grows back
        t_del = time.monotonic()
        kube.delete(ray_path("RayService", ns, SERVICE))
        back = _wait(
            "training back on all its workers", lambda: (p := self.progress()).get("workers") == cfg.workers and p, t
        )
        fig.grow_back_seconds = round(time.monotonic() - t_del, 1)
        fig.seconds_below_full_size = seconds_below(back["history"], cfg.workers, wall_serve, time.time())
        self.say(f"training grew back {fig.grow_back_seconds}s after the service was deleted")
        fig.steps_redone_at_grow_back = self._point("grown back") - after_shrink

        # (e) the whole gang must go: a burst of inference takes every GPU the training holds
        if cfg.suspend_story:
            self._suspend_story()
        final = self.progress()
        fig.training_steps_lost += int(final.get("steps_lost", 0))
        fig.preemption_notices = int(final.get("notices", 0))
        fig.jit_checkpoints = int(final.get("jit_checkpoints", 0))
        return fig

    def _point(self, phase: str, progress: dict[str, Any] | None = None) -> int:
        """Keep progress.json's counters at a phase of the story (``progress``: as just read, else read now); returns
        the steps redone so far."""
        p = self.progress() if progress is None else progress
        keys = (
            "step",
            "workers",
            "starts",
            "steps_lost",
            "resumed_from",
            "notices",
            "jit_checkpoints",
            "jit_committed",
        )
        self.fig.progress_points.append({"phase": phase, **{k: p.get(k) for k in keys}})
        return int(p.get("steps_lost", 0))

    def _suspend_drains(self) -> dict[str, str]:
        """The drains kai-ray's scheduler sent before its last suspend of the training (from its reclaim records), in
        the order sent."""
        records = self.scheduler.reclaimer.records if self.scheduler is not None else []
        suspends = [r for r in records if r.kind == "suspend"]
        return {d.pod: d.status for d in suspends[-1].drains} if suspends else {}

    def _full_or_failed(self) -> dict[str, Any] | None:
        """The progress once training runs on all its workers (a few steps in); raises at once when the RayJob failed
        first, since the wait would otherwise last its full timeout."""
        p = self.progress()
        if p.get("workers") == self.cfg.workers and p.get("step", 0) >= 3:
            return p
        with contextlib.suppress(ApiError):
            status = self.kube.get(ray_path("RayJob", self.ns, JOB)).get("status") or {}
            if status.get("jobDeploymentStatus") == "Failed":
                raise RuntimeError(f"the training RayJob failed: {str(status.get('message', ''))[-2000:]}")
        return None

    def _shrink_record(self) -> dict[str, Any]:

        for pg in self.kube.get(podgroups_path(self.ns))["items"]:
            raw = (pg["metadata"].get("annotations") or {}).get("kai-ray.io/last-shrink")
            if raw and JOB in json.dumps(pg["metadata"].get("ownerReferences") or []):
                loaded: dict[str, Any] = json.loads(raw)
                return loaded
        return {}

    def _suspend_story(self) -> None:

        kube, ns, fig, t, cfg = self.kube, self.ns, self.fig, self.cfg.timeout, self.cfg
        kube.create(pods_path(ns), _busybox_pod("burst", self.busybox, cfg.workers, self.q_training, "inference"))
        before = self.progress()
        step_before = before.get("step", 0)
        starts_before = int(before.get("starts", 0))
        notices_before = int(before.get("notices", 0))
        lost_before = self._point("before the suspend", before)

        def evicted() -> str | None:
            """Suspended or Failed (kai-ray's path), or, under KAI's semantics, the burst running on GPUs the
            training's pods held (they were deleted: KubeRay recreates them, Pending)."""
            try:
                status = kube.get(ray_path("RayJob", ns, JOB)).get("status") or {}
                burst = kube.get(pods_path(ns, "burst"))
            except ApiError:
                return None
            state = status.get("jobDeploymentStatus")
            if state in ("Suspended", "Failed") or status.get("jobStatus") == "FAILED":
                return str(state if state in ("Suspended", "Failed") else "Failed")
            if cfg.semantics == "kai" and (burst.get("status") or {}).get("phase") == "Running":
                return "PodsDeleted"
            return None

        outcome = _wait("the RayJob to be suspended, to fail or to lose its pods", evicted, t)
        if outcome != "Suspended":
            fig.notes.append(f"the whole-gang preemption left the RayJob {outcome}, not suspended")
        if outcome == "Failed":
            fig.training_failed = True
            fig.training_steps_lost += int(self.progress().get("step", step_before))
            fig.notes.append("the RayJob failed when its pods were deleted: nothing resumes it")
            kube.delete(pods_path(ns, "burst"))
            return
        self.say(f"the RayJob is {outcome} at step {self.progress().get('step')} (its pods terminating)")
        t_room = time.monotonic()
        kube.delete(pods_path(ns, "burst"))

        def resumed_or_failed() -> dict[str, Any] | None:
            p = self.progress()
            started_again = int(p.get("starts", 0)) > starts_before and p.get("resumed_from") is not None
            if started_again and p.get("step", 0) > p["resumed_from"]:
                return p
            with contextlib.suppress(ApiError):
                status = kube.get(ray_path("RayJob", ns, JOB)).get("status") or {}
                if status.get("jobDeploymentStatus") == "Failed" or status.get("jobStatus") == "FAILED":
                    return {"failed": True, **p}
            return None

        resumed = _wait("the RayJob to resume from its checkpoint and train again (or to fail)", resumed_or_failed, t)
        if resumed.get("failed"):
            fig.training_failed = True
            fig.training_steps_lost += int(resumed.get("step", step_before))
            fig.notes.append("the RayJob failed after its pods were deleted: nothing resumes it")
            return
        fig.suspend_to_resume_seconds = round(time.monotonic() - t_room, 1)
        fig.resumed_from_step = int(resumed["resumed_from"])
        fig.steps_redone_at_resume = self._point("resumed") - lost_before
        fig.suspend_notice_taken = int(self.progress().get("notices", 0)) > notices_before
        fig.suspend_drains = self._suspend_drains()
        self.say(f"resumed from step {fig.resumed_from_step} {fig.suspend_to_resume_seconds}s after room returned")

    def close(self) -> None:

        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(5)
        for kind, name in (("RayService", SERVICE), ("RayJob", JOB)):
            with contextlib.suppress(ApiError):
                self.kube.delete(ray_path(kind, self.ns, name))
        for op in reversed(self.operators):
            op.stop()
        for queue in (f"{self.ns}-training", f"{self.ns}-other", f"{self.ns}-ml-platform"):
            with contextlib.suppress(ApiError):
                self.kube.delete(queues_path(queue))
        if "kuberay-operator" in self.node.plane.components:
            self.node.plane.stop_component("kuberay-operator")
        shutil.rmtree(self.ckpt_root, ignore_errors=True)


def _busybox_pod(name: str, image: str, gpus: int, queue: str, priority: str) -> dict[str, Any]:
    """A pod that only holds GPUs; kai-ray's podgrouper makes it a one-pod gang in ``queue`` at ``priority``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue, "priorityClassName": priority}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }
