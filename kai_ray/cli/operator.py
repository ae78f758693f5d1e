"""``kai-ray operator podgrouper|scheduler [options]``: run an operator in this process (the Helm chart's command)."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import typer

from kai_ray import constants as c
from kai_ray.cli import CliError, app
from kai_ray.durations import flag
from kai_ray.k8s.config import ConfigError, OperatorConfig, parse_selector

operator_app = typer.Typer(
    help="Run a kai-ray operator (podgrouper or scheduler) against the cluster in KUBECONFIG or in-cluster.",
    no_args_is_help=True,
)
app.add_typer(operator_app, name="operator")

HELP = {
    "podgrouper": "Group pods of our scheduler and Ray CRs into PodGroups and stamp the pods.",
    "scheduler": "Schedule PodGroups: bind, evict, and write PodGroup/Queue status and Events.",
}


def duration(value: str, name: str) -> float:
    """A duration flag: a unit is required, as for every duration flag of the CLI (``15`` is refused, ``15s`` read)."""
    try:
        return flag(value)
    except ValueError as exc:
        raise CliError(f"{name}: {exc}") from None


def build_config(**opts: Any) -> OperatorConfig:
    """CLI values -> a validated OperatorConfig; every bad value becomes a CliError naming the flag."""
    if opts.get("kind") == "scheduler" and opts.get("kai_coexistence"):
        raise CliError("--kai-coexistence: KAI's scheduler schedules in this mode; run only `operator podgrouper`")
    try:
        cfg = OperatorConfig(
            kubeconfig=opts["kubeconfig"],
            context=opts["context"],
            scheduler_name=opts["scheduler_name"],
            queue_label_key=opts["queue_label_key"],
            namespaces=tuple(opts["namespace"] or ()),
            node_selector=parse_selector(opts["node_selector"] or ""),
            node_pool=opts.get("node_pool") or "",
            node_pool_label_key=opts.get("node_pool_label_key") or c.NODE_POOL_LABEL,
            leader_elect=opts["leader_elect"],
            lease_name=opts["lease_name"] or "",
            lease_namespace=opts["lease_namespace"] or "",
            lease_duration=duration(opts["lease_duration"], "--lease-duration"),
            renew_deadline=duration(opts["renew_deadline"], "--renew-deadline"),
            retry_period=duration(opts["retry_period"], "--retry-period"),
            bind_address=opts["bind_address"],
            metrics_port=opts["metrics_port"],
            health_port=opts["health_port"],
            placement_strategy=opts["placement_strategy"],
            preemption_delay=duration(opts["preemption_delay"], "--preemption-delay"),
            queue_priority_reclaim=opts["queue_priority_reclaim"],
            eviction_mode=opts["eviction_mode"],
            eviction_grace_seconds=opts["eviction_grace_seconds"],
            schedule_period=duration(opts["schedule_period"], "--schedule-period"),
            bind_workers=opts["bind_workers"],
            write_workers=opts["write_workers"],
            kai_compatible_priorities=opts["kai_compatible_priorities"],
            elastic_reclaim=opts["elastic_reclaim"],
            suspend_kinds=_kinds(opts["suspend_kinds"]),
            drain_deadline=duration(opts["drain_deadline"], "--drain-deadline"),
            headroom_interval=duration(opts["headroom_interval"], "--headroom-interval"),
            kai_coexistence=opts["kai_coexistence"],
            upstream_gangs=opts.get("upstream_gangs") or False,
            webhook_port=opts.get("webhook_port") or 9443,
            webhook_url=opts.get("webhook_url") or "",
            webhook_service=opts.get("webhook_service") or "kai-ray-podgrouper-webhook",
            webhook_cert_dir=opts.get("webhook_cert_dir") or "",
            queue_admission_gating=opts.get("queue_admission_gating") or "off",
            reservation_ttl=duration(opts.get("reservation_ttl") or "10m", "--reservation-ttl"),
            default_priority=_priorities(opts["default_priority"]),
            max_gang_pods=opts["max_gang_pods"],
            idle_aware_victims=opts["idle_aware_victims"],
            checkpoint_aware_victims=opts["checkpoint_aware_victims"],
            ready_timeout=duration(opts["ready_timeout"], "--ready-timeout"),
            ready_timeout_backoff=duration(opts["ready_timeout_backoff"], "--ready-timeout-backoff"),
            upgrade_surge=opts["upgrade_surge"],
            ray_activity_interval=duration(opts["ray_activity_interval"], "--ray-activity-interval"),
            k_value=opts["k_value"],
            usage_db=opts["usage_db"],
            usage_db_url=opts["usage_db_url"] or "",
            usage_window_size=opts["usage_window_size"],
            usage_window_type=opts["usage_window_type"],
            usage_half_life_period=opts["usage_half_life_period"] or "",
            usage_tumbling_window_start_time=opts["usage_tumbling_window_start_time"] or "",
            usage_cron_string=opts["usage_cron_string"] or "",
            usage_fetch_interval=opts["usage_fetch_interval"],
            usage_staleness_period=opts["usage_staleness_period"],
            usage_extra_params=_pairs(opts["usage_extra_param"], "--usage-extra-param"),
        )
        if opts["identity"]:
            cfg.identity = opts["identity"]
        return cfg.validate()
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _kinds(values: list[str] | None) -> tuple[str, ...]:
    """``--suspend-kinds`` (repeatable, comma-separated; ``none`` for none) -> kinds; unset -> RayJob."""
    if not values:
        return ("RayJob",)
    kinds = [k.strip() for v in values for k in v.split(",") if k.strip()]
    return () if kinds in ([], ["none"]) else tuple(kinds)


def _priorities(values: list[str] | None) -> dict[str, str]:
    """``--default-priority KIND=CLASS`` (repeatable) -> {kind: class}."""
    out: dict[str, str] = {}
    for value in values or ():
        kind, sep, pclass = value.partition("=")
        if not sep or not kind.strip():
            raise ConfigError(f"--default-priority: {value!r} is not KIND=CLASS (e.g. RayService=inference)")
        out[kind.strip()] = pclass.strip()
    return out


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    """``KEY=VALUE`` (repeatable; the value may hold commas and ``=``) -> {key: value}."""
    out: dict[str, str] = {}
    for value in values or ():
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: {value!r} is not KEY=VALUE")
        out[key.strip()] = val
    return out


def _check_cert_dir(directory: str) -> None:
    """``--webhook-cert-dir`` must hold a readable certificate now: said in one line, not when the webhook starts."""
    from kai_ray.k8s.base.mountedcert import CertDirError, MountedCert

    try:
        MountedCert(Path(directory)).load()
    except CertDirError as exc:
        raise CliError(str(exc)) from None


def parse_args(kind: str, args: list[str]) -> OperatorConfig:
    """The OperatorConfig that ``kai-ray operator <kind> <args>`` would run with, without starting anything (used to
    check the Helm chart's rendered arguments against the real parser). Bad flags raise CliError."""
    import typer.main

    commands: dict[str, Any] = getattr(typer.main.get_command(operator_app), "commands", {})
    command = commands.get(kind)
    if command is None:
        raise CliError(f"operator: {kind!r} is not one of {', '.join(sorted(commands))}")
    try:
        ctx = command.make_context(f"kai-ray operator {kind}", list(args))
    except Exception as exc:  # the parser's usage errors (typer vendors its own click)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise CliError(f"kai-ray operator {kind}: {message}") from None
    _log_level(ctx.params["log_level"])
    return build_config(kind=kind, **ctx.params)


def _log_level(name: str) -> int:
    level = getattr(logging, name.upper(), None)
    if not isinstance(level, int):
        raise CliError(f"--log-level: {name!r} is not DEBUG, INFO, WARNING or ERROR")
    return level


CLUSTER = "Cluster and leader election (both operators)"
SERVING = "Metrics, health and logs (both operators)"
GATING = "Queue-admission gate for node autoscalers (both operators)"
PANELS = {
    "scheduling": "Scheduling",
    "reclaim": "Ray-aware reclaim and the autoscaler hook",
    "raynative": "Ray-native scheduling (docs/ray-native.md)",
    "usage": "Time-based fair share (KAI's usageDBConfig)",
    "podgrouper": "Podgrouper",
}
OWNER = {
    "scheduling": "scheduler",
    "reclaim": "scheduler",
    "raynative": "scheduler",
    "usage": "scheduler",
    "podgrouper": "podgrouper",
}


def _option(kind: str, default: Any, help: str, *decls: str, panel: str = CLUSTER, metavar: str | None = None) -> Any:
    """One option of ``kai-ray operator <kind>``: both operators take every option (the chart passes what it passes),
    but each lists only its own, under a panel, and a flag shows no value placeholder (``metavar=""``)."""
    owner = OWNER.get(panel)
    return typer.Option(
        default,
        *decls,
        help=help,
        rich_help_panel=PANELS.get(panel, panel),
        hidden=owner is not None and owner != kind,
        metavar=metavar,
        show_default=not isinstance(default, bool),
    )


def _define(kind: str) -> None:
    o = partial(_option, kind)
    workers = "concurrent binding requests" if kind == "scheduler" else "concurrent reconciles"

    def command(
        kubeconfig: str | None = o(None, "kubeconfig file (default: $KUBECONFIG, in-cluster)", metavar="FILE"),
        context: str | None = o(None, "kubeconfig context", metavar="NAME"),
        scheduler_name: str = o("kai-scheduler", "spec.schedulerName this operator serves", metavar="NAME"),
        queue_label_key: str = o("kai.scheduler/queue", "label that names a workload's queue", metavar="KEY"),
        namespace: list[str] | None = o(
            None, "namespace to serve (repeatable; default all)", "--namespace", "-n", metavar="NS"
        ),
        node_selector: str | None = o(
            None, "only nodes with these labels, e.g. a node pool", panel="scheduling", metavar="K=V,..."
        ),
        node_pool: str | None = o(
            None,
            "KAI's SchedulingShard: only nodes, Queues, PodGroups labelled <node-pool-label-key>=NAME "
            "('default': those without the label)",
            panel="scheduling",
            metavar="NAME",
        ),
        node_pool_label_key: str = o(
            c.NODE_POOL_LABEL, "label that names a node pool", panel="scheduling", metavar="KEY"
        ),
        leader_elect: bool = o(True, "elect a leader through a Lease"),
        lease_name: str | None = o(None, "Lease name (default kai-ray-<operator>)", metavar="NAME"),
        lease_namespace: str | None = o(None, "Lease namespace (default: own namespace)", metavar="NS"),
        lease_duration: str = o("15s", "Lease duration", metavar="DURATION"),
        renew_deadline: str = o("10s", "give up leadership after failing to renew this long", metavar="DURATION"),
        retry_period: str = o("2s", "Lease renew/retry period", metavar="DURATION"),
        identity: str | None = o(None, "leader-election identity (default host_random)", metavar="ID"),
        bind_address: str = o("0.0.0.0", "address of the metrics and health servers", panel=SERVING, metavar="IP"),
        metrics_port: int = o(8080, "Prometheus /metrics port (0: off)", panel=SERVING, metavar="PORT"),
        health_port: int = o(8081, "/healthz port (0: off)", panel=SERVING, metavar="PORT"),
        placement_strategy: str = o(
            "binpack", "binpack or spread (KAI's), bestfit, fgd or cpufgd", panel="scheduling", metavar="NAME"
        ),
        preemption_delay: str = o(
            "0s", "default time a group waits before it may evict", panel="scheduling", metavar="DURATION"
        ),
        queue_priority_reclaim: bool = o(
            False,
            "higher-priority queues may reclaim in-quota resources",
            "--queue-priority-reclaim",
            panel="scheduling",
        ),
        eviction_mode: str = o(
            "evict", "evict (Eviction API, PDBs respected) or delete", panel="scheduling", metavar="MODE"
        ),
        eviction_grace_seconds: int | None = o(
            None, "grace period of evicted pods (default: the pod's own)", panel="scheduling", metavar="SECONDS"
        ),
        schedule_period: str = o("1s", "periodic cycle interval", panel="scheduling", metavar="DURATION"),
        bind_workers: int = o(32, workers, metavar="N"),
        write_workers: int = o(8, "concurrent status/Event writes", panel="scheduling", metavar="N"),
        kai_compatible_priorities: bool = o(
            False,
            "every Ray kind defaults to 'train' (KAI's default)",
            "--kai-compatible-priorities",
            panel="podgrouper",
        ),
        elastic_reclaim: bool = o(
            True, "shrink a KubeRay worker group instead of evicting its elastic workers", panel="reclaim"
        ),
        suspend_kinds: list[str] | None = o(
            None,
            "Ray kinds whose whole gangs are suspended (spec.suspend) instead of evicted, and resumed when "
            "admitted (repeatable or comma-separated; 'none' for none; default RayJob)",
            panel="reclaim",
            metavar="KINDS",
        ),
        drain_deadline: str = o(
            "30s",
            "time a drained Ray node gets before its pod is taken (0s: no draining)",
            panel="reclaim",
            metavar="DURATION",
        ),
        headroom_interval: str = o(
            "2s",
            "how often the Ray autoscaler hook's headroom is published (0s: off)",
            panel="reclaim",
            metavar="DURATION",
        ),
        kai_coexistence: bool = o(
            False,
            "KAI's scheduler schedules; mark Ray objects and stamped pods kai.scheduler/skip-podgrouper so KAI's "
            "podgrouper leaves them to kai-ray",
            "--kai-coexistence",
            panel="podgrouper",
        ),
        upstream_gangs: bool = o(
            False,
            "also write each gang as a Kubernetes scheduling.k8s.io/v1beta1 Workload and PodGroup, and name it in "
            "new Ray pods (spec.schedulingGroup) through an admission webhook; needs Kubernetes 1.37 with "
            "GenericWorkload on",
            "--upstream-gangs",
            panel="podgrouper",
        ),
        webhook_port: int = o(
            9443, "port of the admission webhook (--upstream-gangs)", panel="podgrouper", metavar="N"
        ),
        webhook_service: str = o(
            "kai-ray-podgrouper-webhook",
            "Service in front of the webhook, in the operator's namespace (its certificate names it)",
            panel="podgrouper",
            metavar="NAME",
        ),
        webhook_url: str | None = o(
            None,
            "URL the API server calls the webhook at (default: the kai-ray-podgrouper-webhook Service, port 443)",
            panel="podgrouper",
            metavar="URL",
        ),
        webhook_cert_dir: str | None = o(
            None,
            "serve the webhook's tls.crt and tls.key from this directory (cert-manager's Secret, mounted; renewals "
            "are picked up) and leave its MutatingWebhookConfiguration to the installer (the chart, with "
            "cert-manager's CA injection); default: the podgrouper makes its own certificate and registration",
            panel="podgrouper",
            metavar="DIR",
        ),
        queue_admission_gating: str = o(
            "off",
            "KAI's queue-admission gate (docs/autoscaling.md): pods of opted-in Queues (queues) or of every queue "
            "(all) are created gated and ungated once quota admits their gang, so node autoscalers never buy nodes "
            "for them; the same value on both operators",
            panel=GATING,
            metavar="MODE",
        ),
        reservation_ttl: str = o(
            "10m",
            "how long an ungated gang still pending holds its queue's room",
            panel="scheduling",
            metavar="DURATION",
        ),
        default_priority: list[str] | None = o(
            None, "PriorityClass of a Ray kind that names none (repeatable)", panel="podgrouper", metavar="KIND=CLASS"
        ),
        max_gang_pods: int = o(10_000, "pods one gang may have; a Ray object asking for more is refused", metavar="N"),
        idle_aware_victims: bool = o(
            True,
            "among equal victims, evict Ray workloads idle in Ray first, then those busy for the shortest time",
            "--ray-idle/--no-ray-idle",
            panel="raynative",
        ),
        ray_activity_interval: str = o(
            "30s",
            "how often Ray's idle/busy state is read from each cluster's GCS (0s: off; needs the 'ray' extra)",
            panel="raynative",
            metavar="DURATION",
        ),
        checkpoint_aware_victims: bool = o(
            True,
            "among equal victims, evict the most recently checkpointed first",
            "--ray-checkpoints/--no-ray-checkpoints",
            panel="raynative",
        ),
        ready_timeout: str = o(
            "0s",
            "evict a gang bound but not all Ready this long (0s: off; an annotation on the Ray object overrides)",
            panel="raynative",
            metavar="DURATION",
        ),
        ready_timeout_backoff: str = o(
            "1m",
            "how long a gang evicted for its ready-timeout waits before it is placed again",
            panel="raynative",
            metavar="DURATION",
        ),
        upgrade_surge: bool = o(
            True,
            "a RayService's pending upgrade cluster may exceed its queue's quota up to the limit",
            "--upgrade-surge/--no-upgrade-surge",
            panel="raynative",
        ),
        k_value: float = o(1.0, "weight of historical usage in the over-quota division (kValue)", panel="usage"),
        usage_db: str = o(
            "none",
            "usage source: none (off), internal (kept in the Queue status), prometheus (KAI's query)",
            panel="usage",
            metavar="SOURCE",
        ),
        usage_db_url: str | None = o(None, "Prometheus base URL (prometheus)", panel="usage", metavar="URL"),
        usage_window_size: str = o("1w", "usage window (1w, 2d, 12h)", panel="usage", metavar="DURATION"),
        usage_window_type: str = o("sliding", "sliding, tumbling or cron", panel="usage", metavar="TYPE"),
        usage_half_life_period: str | None = o(
            None, "usage decay half-life (empty or 0: no decay)", panel="usage", metavar="DURATION"
        ),
        usage_tumbling_window_start_time: str | None = o(
            None, "RFC 3339 start of the tumbling windows", panel="usage", metavar="TIME"
        ),
        usage_cron_string: str | None = o(
            None, "cron expression of the window's resets", panel="usage", metavar="CRON"
        ),
        usage_fetch_interval: str = o(
            "1m", "how often usage is refreshed (and persisted)", panel="usage", metavar="DURATION"
        ),
        usage_staleness_period: str = o(
            "5m", "usage older than this is reported stale", panel="usage", metavar="DURATION"
        ),
        usage_extra_param: list[str] | None = o(
            None, "prometheus query override (KAI's extraParams; repeatable)", panel="usage", metavar="KEY=VALUE"
        ),
        log_level: str = o("INFO", "DEBUG, INFO, WARNING, ERROR", panel=SERVING, metavar="LEVEL"),
    ) -> None:
        opts = dict(locals())
        level = _log_level(log_level)
        config = build_config(**{**opts, "kind": kind})
        if config.webhook_cert_dir:
            _check_cert_dir(config.webhook_cert_dir)
        from kai_ray.cli.connection import connect
        from kai_ray.extras import require
        from kai_ray.k8s.engines import start_early

        require("kopf", purpose="this")
        connect(config.kubeconfig, config.context, pool_size=1).close()
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        engine, started = start_early(kind, config)  # it lists while kopf is imported
        try:
            from kai_ray.k8s.kopf_app import run
        except BaseException:
            if started:
                engine.stop(release=True)
            raise
        run(kind, config, engine, started)

    command.__name__ = f"operator_{kind}"
    command.__doc__ = HELP[kind]
    operator_app.command(kind)(command)


for _kind in ("podgrouper", "scheduler"):
    _define(_kind)
