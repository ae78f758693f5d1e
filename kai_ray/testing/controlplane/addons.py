"""Components a test starts on demand next to a running control plane: the real KubeRay operator and
kube-controller-manager.

Why apart from :mod:`~kai_ray.testing.controlplane.harness`: the control plane itself is etcd + kube-apiserver
(+ KWOK); these optional processes only borrow its kubeconfig, PKI and process registry, so their flags and probes live
here and :class:`~kai_ray.testing.controlplane.harness.ControlPlane` keeps thin methods that call them.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kai_ray.testing.controlplane import build
from kai_ray.testing.controlplane.processes import Component, ControlPlaneError, await_ready, free_port

if TYPE_CHECKING:
    from kai_ray.testing.controlplane.harness import ControlPlane


def start_kuberay_operator(
    plane: ControlPlane,
    batch_scheduler: str | None = "kai-scheduler",
    watch_namespace: str | None = None,
    extra_args: Iterable[str] = (),
    timeout: float = 120.0,
) -> Component:
    """Run the real KubeRay operator (built from its Go module) against ``plane`` until :meth:`ControlPlane.stop`.

    Install the KubeRay CRDs first (:meth:`ControlPlane.install_crds`). Leader election is off and the probe/metrics
    endpoints bind to loopback; ready once its ``/readyz`` answers.
    """
    if "kuberay-operator" in plane.components and plane.components["kuberay-operator"].alive():
        raise ControlPlaneError("the KubeRay operator is already running")
    binary = build.ensure("kuberay-operator")
    probe = free_port()
    argv = [
        str(binary),
        f"--kubeconfig={plane.kubeconfig_path}",
        "--enable-leader-election=false",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        f"--metrics-addr=127.0.0.1:{free_port()}",
        "--qps=500",
        "--burst=1000",
    ]
    if batch_scheduler:
        argv.append(f"--batch-scheduler={batch_scheduler}")
    if watch_namespace:
        argv.append(f"--watch-namespace={watch_namespace}")
    argv.extend(extra_args)
    env = plane.env()
    env.pop("ENABLE_WEBHOOKS", None)
    comp = plane._spawn("kuberay-operator", argv, env=env)

    def ready() -> bool:
        if not comp.alive():
            raise comp.failure("exited during startup")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError:
            return False

    return await_ready(comp, "kuberay-operator to report /readyz", ready, timeout)


def start_controller_manager(
    plane: ControlPlane,
    controllers: Sequence[str] = ("job",),
    feature_gates: Sequence[str] = (),
    timeout: float = 120.0,
) -> Component:
    """Run the real kube-controller-manager with only ``controllers`` (the Job controller by default) until
    :meth:`ControlPlane.stop`, so a test sees what that controller itself creates (a Job's pods, its Workload and
    PodGroup under ``WorkloadWithJob``) instead of playing it. ``feature_gates``: ``Name=true`` entries."""
    if "kube-controller-manager" in plane.components and plane.components["kube-controller-manager"].alive():
        raise ControlPlaneError("kube-controller-manager is already running")
    assert plane.workdir is not None and plane._pki is not None
    binary = build.ensure("kube-controller-manager")
    port = free_port()
    argv = [
        str(binary),
        f"--kubeconfig={plane.kubeconfig_path}",
        f"--authentication-kubeconfig={plane.kubeconfig_path}",
        f"--authorization-kubeconfig={plane.kubeconfig_path}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={plane.workdir / 'kcm'}",
        f"--service-account-private-key-file={plane._pki.sa_key}",
        f"--root-ca-file={plane._pki.ca_cert}",
        "--use-service-account-credentials=false",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        "--profiling=false",
        "--v=1",
        *([f"--feature-gates={','.join(feature_gates)}"] if feature_gates else []),
    ]
    comp = plane._spawn("kube-controller-manager", argv)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate

    def healthy() -> bool:
        if not comp.alive():
            raise comp.failure("exited during startup")
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)

    return await_ready(comp, "kube-controller-manager to report /healthz", healthy, timeout)
