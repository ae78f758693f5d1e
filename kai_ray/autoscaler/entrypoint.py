"""``python -m kai_ray.autoscaler``: the KubeRay autoscaler sidecar, with kai-ray's headroom-gated providers.

Does what ``ray kuberay-autoscaler`` does (wait for the head's GCS, read the RayCluster every iteration, run the v1
or v2 monitor as the head was started with) after installing :class:`KaiKubeRayNodeProvider` (v1) and
:class:`KaiKubeRayProvider` (v2) in place of Ray's KubeRay providers. The RayCluster is read through kai-ray's client,
so the same command also runs outside a pod with ``$KUBECONFIG`` (for tests and debugging).

Enable it on KubeRay >= 1.7 through ``autoscalerOptions.command``/``args`` (see kai_ray/autoscaler/README.md and
examples/raycluster-kai-autoscaler.yaml); the autoscaler image needs ``kai-ray[ray]`` with the cluster's Ray version.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from typing import Any

log = logging.getLogger("kai_ray.autoscaler")

_installed = False


def install() -> None:
    """Make Ray's autoscaler build kai-ray's providers wherever it would build its KubeRay ones. Idempotent.

    v1 looks providers up in a registry by type name; v2's ``Autoscaler`` names ``KubeRayProvider`` directly, so
    the name in that module is rebound. Keeping the provider type ``kuberay`` keeps every other KubeRay special case
    in Ray (config validation, node updaters off) intact."""
    global _installed
    if _installed:
        return
    from kai_ray.autoscaler.providers import KaiKubeRayNodeProvider, KaiKubeRayProvider

    v1_registry: Any = importlib.import_module("ray.autoscaler._private.providers")
    v2_autoscaler: Any = importlib.import_module("ray.autoscaler.v2.autoscaler")
    v1_registry._NODE_PROVIDERS["kuberay"] = lambda _config: KaiKubeRayNodeProvider
    v1_registry._provider_instances.clear()
    v2_autoscaler.KubeRayProvider = KaiKubeRayProvider
    _installed = True


def _wait_for_gcs(address: str, timeout_s: float | None) -> None:
    from kai_ray.k8s.ray.raygcs import _tcp_reachable

    start = time.monotonic()
    while True:
        why = _tcp_reachable(address, 2.0)
        if why is None:
            return
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            raise SystemExit(f"kai-ray autoscaler: {why}")
        log.info("the Ray head is not ready (%s); retrying in 2 s", why)
        time.sleep(2.0)


def _config_producer(cluster: str, namespace: str) -> Any:
    """Ray's RayCluster -> autoscaling-config producer, reading through kai-ray's client."""
    from ray.autoscaler._private.kuberay.autoscaling_config import AutoscalingConfigProducer

    from kai_ray.autoscaler.providers import RayKubeClient

    producer: Any = AutoscalingConfigProducer(cluster, namespace)
    producer.kubernetes_api_client = RayKubeClient.from_env(namespace)
    return producer


def run(cluster: str, namespace: str, gcs_address: str, *, metrics: bool = True, wait_s: float | None = None) -> None:
    """Run the autoscaler monitor until it exits (v1 exits after repeated failures; Kubernetes restarts it)."""
    import ray
    from ray._private.services import canonicalize_bootstrap_address_or_die, get_node_ip_address
    from ray.autoscaler._private.kuberay import run_autoscaler as ray_run
    from ray.autoscaler.v2.instance_manager.config import KubeRayConfigReader
    from ray.autoscaler.v2.utils import is_autoscaler_v2

    install()
    address = canonicalize_bootstrap_address_or_die(gcs_address)
    _wait_for_gcs(address, wait_s)
    gcs = importlib.import_module("ray._raylet").GcsClient(address)
    log_dir = ray_run._get_log_dir(gcs)
    ray_run._setup_logging(log_dir)
    producer = _config_producer(cluster, namespace)
    monitor_ip = get_node_ip_address() if metrics else None
    if is_autoscaler_v2(fetch_from_server=True, gcs_client=gcs):
        from ray.autoscaler.v2.monitor import AutoscalerMonitor

        log.info("kai-ray: autoscaler v2 for RayCluster %s/%s", namespace, cluster)
        AutoscalerMonitor(
            address=gcs.address, config_reader=KubeRayConfigReader(producer), log_dir=log_dir, monitor_ip=monitor_ip
        ).run()
    else:
        from ray.autoscaler._private.monitor import Monitor

        log.info("kai-ray: autoscaler v1 for RayCluster %s/%s", namespace, cluster)
        Monitor(address=gcs.address, autoscaling_config=producer, monitor_ip=monitor_ip, retry_on_failure=False).run()
    del ray


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kai_ray.autoscaler",
        description="KubeRay autoscaler sidecar whose scale-ups never exceed the kai-ray scheduler's headroom.",
    )
    parser.add_argument("--cluster-name", default=os.environ.get("RAY_CLUSTER_NAME"), help="$RAY_CLUSTER_NAME")
    parser.add_argument(
        "--cluster-namespace", default=os.environ.get("RAY_CLUSTER_NAMESPACE"), help="$RAY_CLUSTER_NAMESPACE"
    )
    parser.add_argument("--gcs-address", default=None, help="host:port of the head's GCS (default: this pod, 6379)")
    parser.add_argument("--no-metrics", action="store_true", help="do not serve the autoscaler's Prometheus metrics")
    parser.add_argument("--wait-s", type=float, default=None, help="give up if the GCS is not up after this long")
    args = parser.parse_args(argv)
    if not args.cluster_name or not args.cluster_namespace:
        print(
            "kai-ray autoscaler: --cluster-name and --cluster-namespace (or $RAY_CLUSTER_NAME and "
            "$RAY_CLUSTER_NAMESPACE) are required",
            file=sys.stderr,
        )
        return 2
    try:
        import ray  # noqa: F401
    except ImportError:
        print("kai-ray autoscaler: ray is not installed (in a kai-ray checkout: pip install '.[ray]')", file=sys.stderr)
        return 2
    if args.gcs_address is None:
        from ray._private.services import get_node_ip_address

        args.gcs_address = f"{get_node_ip_address()}:6379"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(args.cluster_name, args.cluster_namespace, args.gcs_address, metrics=not args.no_metrics, wait_s=args.wait_s)
    return 0
