"""kopf as the operators' runtime: login, lifecycle, signals, liveness probe; the work itself is in our engines.

Why the engines do their own watching instead of kopf resource handlers: the scheduler needs one consistent in-memory
picture (an informer cache) rather than per-object handlers, server-side field selectors, Lease-based leader
election (kopf's peering pauses rather than elects), and tens of thousands of events a minute on two cores. kopf
still owns the process: it authenticates, starts the engine in ``on.startup`` (unless ``kai-ray operator ...``
started it already, :mod:`kai_ray.k8s.engines`), serves ``/healthz`` from the engine's ``on.probe``, and stops it
cleanly in ``on.cleanup`` on SIGTERM.

``register`` is shared by ``kai-ray operator ...`` (its own registry) and the thin ``operators/*.py`` files that
``kopf run`` loads (kopf's default registry, settings from ``KAI_RAY_*`` environment variables).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from kai_ray.k8s.base.rest import Kube
from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.engines import KINDS, Engine, make_engine

log = logging.getLogger(__name__)


def connection_info(config: OperatorConfig) -> kopf.ConnectionInfo:
    """kopf's credentials from the same kubeconfig (or service account) our engine uses."""
    kube = Kube.connect(config.kubeconfig, config.context, pool_size=1)
    cfg = kube.configuration
    auth = cfg.auth_settings().get("BearerToken") or {}
    scheme, _, token = str(auth.get("value") or "").partition(" ")
    kube.close()
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
    )


def register(
    kind: str,
    config: OperatorConfig,
    registry: kopf.OperatorRegistry | None = None,
    engine: Engine | None = None,
    started: bool = False,
) -> dict[str, Any]:
    """Register the handlers that run operator ``kind`` (``engine``: one already built, and ``started`` already:
    :func:`~kai_ray.k8s.engines.start_early`); returns a holder whose ``engine`` is set while running."""
    if kind not in KINDS:
        raise ValueError(f"unknown operator {kind!r}: expected one of {', '.join(KINDS)}")
    holder: dict[str, Any] = {"engine": engine if started else None}
    reg = registry if registry is not None else kopf.get_default_registry()

    @kopf.on.login(registry=reg, errors=kopf.ErrorsMode.PERMANENT)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(config)

    @kopf.on.startup(registry=reg)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.peering.standalone = True
        settings.scanning.disabled = True
        settings.posting.level = logging.WARNING
        settings.networking.request_timeout = 30
        running = engine if engine is not None else make_engine(kind, config)
        holder["engine"] = running
        # kopf scans the API once startup returns, retrying and logging on its own: wait here until the server
        # answers, so an unreachable server is one retry loop with backoff (ours), not two
        reach = running.kube.reachability
        if not await asyncio.to_thread(reach.check):
            while not reach.up:
                await asyncio.sleep(0.2)
        if not started:
            running.start()
        log.info("kai-ray %s started (identity %s)", kind, config.identity)

    @kopf.on.cleanup(registry=reg)
    def cleanup(**_: Any) -> None:
        running = holder.get("engine")
        if running is not None:
            running.stop(release=True)
            holder["engine"] = None

    @kopf.on.probe(id=kind, registry=reg)
    def probe(**_: Any) -> dict[str, Any]:
        running = holder.get("engine")
        if running is None:
            return {"starting": True}
        result: dict[str, Any] = running.health()
        return result

    return holder


def run(kind: str, config: OperatorConfig, engine: Engine | None = None, started: bool = False) -> None:
    """Run operator ``kind`` in this process until SIGINT/SIGTERM (what the Helm chart's Deployments execute);
    ``engine`` and ``started`` as :func:`register` takes them."""
    registry = kopf.OperatorRegistry()
    holder = register(kind, config, registry, engine, started)
    liveness = f"http://{config.bind_address}:{config.health_port}/healthz" if config.health_port else None
    # Without an identity kopf asks getpass.getuser(), which raises KeyError for a uid that /etc/passwd does not list
    # (the image and the chart run as 65532, which no base image lists): the operators crashed at start in a pod.
    identity: Any = config.identity  # kopf's Identity is a NewType of str that kopf does not export
    try:
        kopf.run(registry=registry, standalone=True, clusterwide=True, liveness_endpoint=liveness, identity=identity)
    finally:
        running = holder["engine"]
        if running is not None:  # kopf ended before its cleanup ran (the cleanup lets go of the engine)
            running.stop(release=True)
