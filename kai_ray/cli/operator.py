"""``kai-ray operator podgrouper|scheduler [options]``: run an operator in this process (the Helm chart's command)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

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
            default_priority=_priorities(opts["default_priority"]),
            max_gang_pods=opts["max_gang_pods"],
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


def _define(kind: str) -> None:
    def command(
        kubeconfig: Annotated[
            str | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG, in-cluster)")
        ] = None,
        context: Annotated[str | None, typer.Option(help="kubeconfig context")] = None,
        scheduler_name: Annotated[str, typer.Option(help="spec.schedulerName this operator serves")] = "kai-scheduler",
        queue_label_key: Annotated[
            str, typer.Option(help="label that names a workload's queue")
        ] = "kai.scheduler/queue",
        namespace: Annotated[
            list[str] | None, typer.Option("--namespace", "-n", help="namespace to serve (repeatable; default all)")
        ] = None,
        node_selector: Annotated[
            str | None, typer.Option(help="scheduler: only nodes with these labels (k=v,k2=v2), e.g. a node pool")
        ] = None,
        leader_elect: Annotated[bool, typer.Option(help="elect a leader through a Lease")] = True,
        lease_name: Annotated[str | None, typer.Option(help="Lease name (default kai-ray-<operator>)")] = None,
        lease_namespace: Annotated[str | None, typer.Option(help="Lease namespace (default: own namespace)")] = None,
        lease_duration: Annotated[str, typer.Option(help="Lease duration")] = "15s",
        renew_deadline: Annotated[
            str, typer.Option(help="give up leadership after failing to renew this long")
        ] = "10s",
        retry_period: Annotated[str, typer.Option(help="Lease renew/retry period")] = "2s",
        identity: Annotated[str | None, typer.Option(help="leader-election identity (default host_random)")] = None,
        bind_address: Annotated[str, typer.Option(help="address for the metrics and health servers")] = "0.0.0.0",
        metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port (0: off)")] = 8080,
        health_port: Annotated[int, typer.Option(help="/healthz port (0: off)")] = 8081,
        placement_strategy: Annotated[
            str, typer.Option(help="binpack or spread (KAI's), bestfit or fgd (fragmentation-aware)")
        ] = "binpack",
        preemption_delay: Annotated[str, typer.Option(help="default time a group waits before it may evict")] = "0s",
        queue_priority_reclaim: Annotated[
            bool, typer.Option(help="higher-priority queues may reclaim in-quota resources")
        ] = False,
        eviction_mode: Annotated[str, typer.Option(help="evict (Eviction API, PDBs respected) or delete")] = "evict",
        eviction_grace_seconds: Annotated[
            int | None, typer.Option(help="grace period of evicted pods (default: the pod's own)")
        ] = None,
        schedule_period: Annotated[str, typer.Option(help="periodic cycle interval")] = "1s",
        bind_workers: Annotated[
            int, typer.Option(help="concurrent binding requests (podgrouper: concurrent reconciles)")
        ] = 32,
        write_workers: Annotated[int, typer.Option(help="concurrent status/Event writes")] = 8,
        kai_compatible_priorities: Annotated[
            bool, typer.Option(help="podgrouper: every Ray kind defaults to `train` (KAI's default)")
        ] = False,
        elastic_reclaim: Annotated[
            bool,
            typer.Option(help="scheduler: shrink a KubeRay worker group instead of evicting its elastic workers"),
        ] = True,
        suspend_kinds: Annotated[
            list[str] | None,
            typer.Option(
                help="scheduler: Ray kinds whose whole gangs are suspended (spec.suspend) instead of evicted, and "
                "resumed when admitted (repeatable or comma-separated; 'none' for none; default RayJob)"
            ),
        ] = None,
        drain_deadline: Annotated[
            str, typer.Option(help="scheduler: time Ray gets to move work off shrunk workers (0s: no draining)")
        ] = "30s",
        headroom_interval: Annotated[
            str,
            typer.Option(help="scheduler: how often the headroom for the Ray autoscaler hook is published (0s: off)"),
        ] = "2s",
        kai_coexistence: Annotated[
            bool,
            typer.Option(
                help="podgrouper: KAI's scheduler schedules; mark Ray objects and stamped pods "
                "kai.scheduler/skip-podgrouper so KAI's podgrouper leaves them to kai-ray"
            ),
        ] = False,
        default_priority: Annotated[
            list[str] | None,
            typer.Option(help="podgrouper: PriorityClass of a Ray kind that names none, KIND=CLASS (repeatable)"),
        ] = None,
        max_gang_pods: Annotated[
            int, typer.Option(help="pods one gang may have; a Ray object asking for more is refused with a reason")
        ] = 10_000,
        k_value: Annotated[
            float, typer.Option(help="scheduler: weight of historical usage in the over-quota division (KAI's kValue)")
        ] = 1.0,
        usage_db: Annotated[
            str,
            typer.Option(
                help="scheduler: time-based fair share usage source: none (off), internal (kai-ray keeps it in the "
                "Queue status), prometheus (KAI's query)"
            ),
        ] = "none",
        usage_db_url: Annotated[str | None, typer.Option(help="scheduler: Prometheus base URL (prometheus)")] = None,
        usage_window_size: Annotated[str, typer.Option(help="scheduler: usage window (1w, 2d, 12h)")] = "1w",
        usage_window_type: Annotated[str, typer.Option(help="scheduler: sliding, tumbling or cron")] = "sliding",
        usage_half_life_period: Annotated[
            str | None, typer.Option(help="scheduler: usage decay half-life (empty or 0: no decay)")
        ] = None,
        usage_tumbling_window_start_time: Annotated[
            str | None, typer.Option(help="scheduler: RFC 3339 start of the tumbling windows")
        ] = None,
        usage_cron_string: Annotated[
            str | None, typer.Option(help="scheduler: cron expression of the cron window's resets")
        ] = None,
        usage_fetch_interval: Annotated[
            str, typer.Option(help="scheduler: how often usage is refreshed (and persisted)")
        ] = "1m",
        usage_staleness_period: Annotated[
            str, typer.Option(help="scheduler: usage older than this is reported stale")
        ] = "5m",
        usage_extra_param: Annotated[
            list[str] | None,
            typer.Option(help="scheduler: prometheus query override KEY=VALUE (KAI's extraParams; repeatable)"),
        ] = None,
        log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR")] = "INFO",
    ) -> None:
        opts = dict(locals())
        level = _log_level(log_level)
        config = build_config(**{**opts, "kind": kind})
        from kai_ray.cli.cluster import connect
        from kai_ray.k8s.kopf_app import run

        connect(config.kubeconfig, config.context, pool_size=1).close()
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        run(kind, config)

    command.__name__ = f"operator_{kind}"
    command.__doc__ = HELP[kind]
    operator_app.command(kind)(command)


for _kind in ("podgrouper", "scheduler"):
    _define(_kind)
