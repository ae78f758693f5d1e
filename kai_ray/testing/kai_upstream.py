"""KAI Scheduler's own scheduler and binder as local processes, for the side-by-side benchmark (``bench vs-kai``).

Why processes from a Go build and not KAI's Helm chart: there is no container runtime here, and the benchmark needs
exactly KAI's two scheduling components on the same loopback control plane as kai-ray. Everything KAI's operator
would render for a default installation is reproduced here as data: the scheduler configuration of a default
``binpack`` SchedulingShard (actions and plugin tiers), the command-line arguments and the ``GOGC`` it sets, KAI's
CRDs (read from the Go module at bench time, never committed) and the chart's PriorityClasses and default queues.

Two deliberate differences from a cluster install, both because everything here must listen on 127.0.0.1 only: the
metrics/probe addresses are loopback ports, and the scheduler's plugin server, which has no address flag and would
listen on every interface, is disabled with ``--plugin-server-port=-1`` (its listener then fails to bind and the
scheduler carries on without it).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.harness import Component, free_port

SCHEDULER_NAME = "kai-scheduler"
KAI_NAMESPACE = "kai-scheduler"
RESOURCE_RESERVATION = "kai-resource-reservation"
SCALE_ADJUST = "kai-scale-adjust"
NODEPOOL_LABEL = "kai.scheduler/node-pool"
VERBOSITY = 3  # the scheduler's default, which KAI's operator keeps (it passes no --v)
GOGC = 400  # what KAI's operator sets for the scheduler container

# The ConfigMap KAI's operator writes for a SchedulingShard with placementStrategy gpu=cpu=binpack and no kValue,
# minRuntime or queueDepthPerAction (KAI v0.12's defaults).
SCHEDULER_CONFIG = """\
actions: allocate, consolidation, reclaim, preempt, stalegangeviction
tiers:
- plugins:
  - name: predicates
  - name: proportion
  - name: priority
  - name: nodeavailability
  - name: resourcetype
  - name: podaffinity
  - name: elastic
  - name: kubeflow
  - name: ray
  - name: subgrouporder
  - name: taskorder
  - name: nominatednode
  - name: dynamicresources
  - name: minruntime
  - name: topology
  - name: snapshot
  - name: gpupack
  - name: nodeplacement
    arguments:
      cpu: binpack
      gpu: binpack
  - name: gpusharingorder
"""


def crd_dir() -> Path:
    """``deployments/kai-scheduler/crds`` of the KAI module (downloaded through the module proxy, never committed)."""
    path = build.module_dir(build.KAI_MODULE, build.KAI_VERSION) / "deployments" / "kai-scheduler" / "crds"
    if not path.is_dir():
        raise FileNotFoundError(f"KAI module {build.KAI_VERSION} has no {path}")
    return path


def binaries() -> dict[str, Path]:
    """KAI's scheduler and binder, built from the Go module on first use (~15 minutes cold), then cached."""
    return {name: build.ensure(name) for name in ("kai-scheduler", "kai-binder")}


@dataclass
class ClientLimits:
    """Client-side limits of KAI's processes. A negative QPS disables client-go's rate limiter (kai-ray has none);
    ``None`` leaves the binary's default (the scheduler's 50 QPS / 300 burst)."""

    scheduler_qps: int | None = -1
    scheduler_burst: int | None = None
    binder_qps: int = -1
    binder_burst: int = 1000
    binder_workers: int = 32  # the binder's --max-concurrent-reconciles

    @classmethod
    def as_shipped(cls) -> ClientLimits:
        """What KAI's operator deploys: the scheduler's defaults, the binder at 20 QPS / 100 burst, 10 reconciles."""
        return cls(scheduler_qps=None, binder_qps=20, binder_burst=100, binder_workers=10)


def spawn(name: str, argv: list[str], log_dir: Path, env: dict[str, str]) -> Component:
    """A process in its own session logging to ``log_dir/<name>.log`` (stopped with :meth:`Component.stop`)."""
    log = log_dir / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        fh.write(f"# {' '.join(argv)}\n".encode())
        fh.flush()
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return Component(name, popen, log)


def start_binder(kubeconfig: Path, log_dir: Path, limits: ClientLimits) -> Component:
    """KAI's binder with the arguments KAI's operator gives it (addresses on loopback)."""
    argv = [
        str(binaries()["kai-binder"]),
        f"--kubeconfig={kubeconfig}",
        f"--scheduler-name={SCHEDULER_NAME}",
        f"--resource-reservation-namespace={RESOURCE_RESERVATION}",
        f"--resource-reservation-service-account={RESOURCE_RESERVATION}",
        f"--resource-reservation-app-label={RESOURCE_RESERVATION}",
        f"--scale-adjust-namespace={SCALE_ADJUST}",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        "--cdi-enabled=false",
        f"--max-concurrent-reconciles={limits.binder_workers}",
        f"--qps={limits.binder_qps}",
        f"--burst={limits.binder_burst}",
    ]
    return spawn("kai-binder", argv, log_dir, {**os.environ, "KUBECONFIG": str(kubeconfig)})


def start_scheduler(
    kubeconfig: Path, log_dir: Path, limits: ClientLimits, verbosity: int = VERBOSITY, tag: str = ""
) -> Component:
    """KAI's scheduler with a default binpack shard's configuration and the operator's arguments."""
    conf = log_dir / "kai-scheduler-config.yaml"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(SCHEDULER_CONFIG)
    argv = [
        str(binaries()["kai-scheduler"]),
        f"--scheduler-conf={conf}",
        f"--scheduler-name={SCHEDULER_NAME}",
        f"--namespace={KAI_NAMESPACE}",
        f"--nodepool-label-key={NODEPOOL_LABEL}",
        "--partition-label-value=",
        f"--resource-reservation-app-label={RESOURCE_RESERVATION}",
        f"--listen-address=127.0.0.1:{free_port()}",
        "--plugin-server-port=-1",
        f"--v={verbosity}",
    ]
    if limits.scheduler_qps is not None:
        argv.append(f"--qps={limits.scheduler_qps}")
    if limits.scheduler_burst is not None:
        argv.append(f"--burst={limits.scheduler_burst}")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "GOGC": str(GOGC)}
    return spawn(f"kai-scheduler{tag}", argv, log_dir, env)


def wait_listening(comp: Component, timeout: float = 60.0) -> None:
    """Until the process has opened its metrics listener (its client and informers start right after)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not comp.alive():
            raise RuntimeError(f"{comp.name} exited: {comp.tail()}")
        if comp.listening():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{comp.name} opened no listener in {timeout:.0f}s")


_ZAP_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s")


def log_times(path: Path, pattern: str) -> list[float]:
    """Epoch seconds of every line of a KAI log (zap, ISO-8601 timestamps) that matches ``pattern``."""
    out: list[float] = []
    rx = re.compile(pattern)
    with contextlib.suppress(OSError), open(path, errors="replace") as fh:
        for line in fh:
            if not rx.search(line):
                continue
            m = _ZAP_TS.match(line)
            if m:
                with contextlib.suppress(ValueError):
                    out.append(datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp())
    return out
