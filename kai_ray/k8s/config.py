"""Operator settings: one dataclass shared by the CLI flags, the kopf entrypoints (environment) and the tests.

Durations are seconds (floats); the CLI and the environment accept Go durations ("90s", "1m30s") too.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kai_ray import constants as c
from kai_ray.durations import seconds
from kai_ray.k8s.usagedb import CLIENT_TYPES, PrometheusClient
from kai_ray.scheduler.allocation import PLACEMENT_POLICIES
from kai_ray.scheduler.usage import PARAM_KEYS, UsageConfigError, UsageParams, usage_params_from

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
ENV_PREFIX = "KAI_RAY_"
GATING_MODES = ("off", "queues", "all")  # --queue-admission-gating
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class ConfigError(ValueError):
    """A bad setting; the message names it."""


def default_namespace() -> str:
    """The namespace the operator runs in (for its Lease): the service account's, else ``default``."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        return SA_NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def duration(value: str | float | int, name: str) -> float:
    """Seconds from a number or a Go duration string; raises ConfigError naming the setting."""
    try:
        return seconds(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a duration (e.g. 30s, 1m30s)") from None


@dataclass
class OperatorConfig:
    """Settings of both operators (each reads the ones it needs)."""

    kubeconfig: str | None = None
    context: str | None = None
    scheduler_name: str = c.SCHEDULER_NAME
    queue_label_key: str = c.QUEUE_LABEL
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    node_selector: dict[str, str] = field(default_factory=dict)  # nodes the scheduler may use (a node pool)
    # scheduler: KAI's SchedulingShard. "" = no pools (every node, Queue, PodGroup); "default" = those without the
    # label; any other name = those labelled <node_pool_label_key>=<name>
    node_pool: str = ""
    node_pool_label_key: str = c.NODE_POOL_LABEL
    leader_elect: bool = True
    lease_name: str = ""  # default: kai-ray-<operator>
    lease_namespace: str = ""  # default: the operator's own namespace
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str = field(default_factory=default_identity)
    bind_address: str = "0.0.0.0"
    metrics_port: int = 8080  # 0 disables
    health_port: int = 8081  # 0 disables
    placement_strategy: str = "binpack"  # binpack | spread | bestfit | fgd | cpufgd
    preemption_delay: float = 0.0
    queue_priority_reclaim: bool = False
    eviction_mode: str = "evict"  # evict | delete
    eviction_grace_seconds: int | None = None  # None: the pod's own terminationGracePeriodSeconds
    schedule_period: float = 1.0
    debounce: float = 0.05
    bind_workers: int = 32  # scheduler: concurrent bindings; podgrouper: concurrent reconciles
    write_workers: int = 8
    status_interval: float = 2.0  # minimum seconds between two status writes of one Queue
    kai_compatible_priorities: bool = False  # podgrouper: every Ray kind defaults to `train` (KAI's default)
    default_priority: dict[str, str] = field(default_factory=dict)  # podgrouper: Ray kind -> PriorityClass override
    # podgrouper: KAI's scheduler schedules; Ray owners and stamped pods get kai.scheduler/skip-podgrouper
    kai_coexistence: bool = False
    # podgrouper: also write each gang as Kubernetes' scheduling.k8s.io/v1beta1 Workload + PodGroup, and name it in
    # new Ray pods through an admission webhook (kai_ray.k8s.podgrouping.admission)
    upstream_gangs: bool = False
    webhook_port: int = 9443
    webhook_url: str = ""  # how the API server reaches the webhook; "" = the Service below, port 443
    webhook_service: str = "kai-ray-podgrouper-webhook"  # in the operator's namespace
    # both operators: KAI's queue-admission gate (docs/autoscaling.md). off: no gate (pods already gated are let go);
    # queues: pods of Queues labelled kai.scheduler/queue-admission-gating=true are gated at creation; all: every
    # queue's pods, a missing queue's included. The scheduler removes a gang's gate once its queue's quota admits it,
    # and at once when its queue does not (or no longer) gate.
    queue_admission_gating: str = "off"
    reservation_ttl: float = 600.0  # scheduler: seconds an ungated, still pending gang holds its queue's room
    # scheduler: Ray-aware reclaim (kai_ray.k8s.ray.elastic)
    elastic_reclaim: bool = True  # elastic surplus of KubeRay workers: shrink the worker group instead of evicting
    suspend_kinds: tuple[str, ...] = ("RayJob",)  # whole gangs owned by these kinds are suspended, then resumed
    drain_deadline: float = 30.0  # seconds a drained Ray node gets before its pod is taken (0: no draining)
    headroom_interval: float = 2.0  # seconds between headroom publications for the autoscaler hook (0: off)
    max_gang_pods: int = c.DEFAULT_MAX_GANG_PODS  # larger gangs are refused with a condition naming the field
    # scheduler: Ray-native scheduling (docs/ray-native.md)
    idle_aware_victims: bool = True  # among equal victims, Ray-idle first, then busy for the shortest time
    checkpoint_aware_victims: bool = True  # ... and the least work since kai-ray.io/last-checkpoint-time
    ready_timeout: float = 0.0  # seconds: default kai-ray.io/ready-timeout (0: off)
    ready_timeout_backoff: float = 60.0  # seconds a gang evicted for its ready-timeout waits before placement
    upgrade_surge: bool = True  # a RayService's pending cluster may go above quota, up to the limit
    ray_activity_interval: float = 30.0  # seconds between reads of Ray's idle/busy state from each GCS (0: off)
    # scheduler: time-based fair share, KAI's kValue and usageDBConfig (kai_ray.k8s.usagedb); off unless
    # usage_db is set
    k_value: float = 1.0
    usage_db: str = "none"  # none | internal (kai-ray's own, in Queue status) | prometheus (KAI's query)
    usage_db_url: str = ""  # prometheus: base URL (KAI's connectionString)
    usage_window_size: str = "1w"
    usage_window_type: str = "sliding"  # sliding | tumbling | cron
    usage_half_life_period: str = ""  # empty or 0: no decay
    usage_tumbling_window_start_time: str = ""  # RFC 3339; empty: when accounting starts
    usage_cron_string: str = ""
    usage_fetch_interval: str = "1m"
    usage_staleness_period: str = "5m"
    usage_extra_params: dict[str, str] = field(default_factory=dict)  # prometheus: KAI's extraParams

    def validate(self) -> OperatorConfig:
        if self.placement_strategy not in PLACEMENT_POLICIES:
            raise ConfigError(
                f"--placement-strategy: {self.placement_strategy!r} is not one of {', '.join(PLACEMENT_POLICIES)}"
            )
        if self.eviction_mode not in ("evict", "delete"):
            raise ConfigError(f"--eviction-mode: {self.eviction_mode!r} is not 'evict' or 'delete'")
        if not self.scheduler_name:
            raise ConfigError("--scheduler-name: must not be empty")
        if not self.queue_label_key:
            raise ConfigError("--queue-label-key: must not be empty")
        if self.node_pool and (not self.node_pool_label_key or not _LABEL_VALUE.fullmatch(self.node_pool)):
            raise ConfigError(f"--node-pool: {self.node_pool!r} is not a label value (letters, digits, '-', '_', '.')")
        if self.schedule_period <= 0:
            raise ConfigError(f"--schedule-period: {self.schedule_period} must be positive")
        if self.preemption_delay < 0:
            raise ConfigError(f"--preemption-delay: {self.preemption_delay} must not be negative")
        if self.leader_elect and not 0 < self.renew_deadline < self.lease_duration:
            raise ConfigError("--renew-deadline: must be positive and shorter than --lease-duration")
        for port, name in (
            (self.metrics_port, "--metrics-port"),
            (self.health_port, "--health-port"),
            (self.webhook_port, "--webhook-port"),
        ):
            if not 0 <= port <= 65535:
                raise ConfigError(f"{name}: {port} is not a port number")
        if self.queue_admission_gating not in GATING_MODES:
            raise ConfigError(
                f"--queue-admission-gating: {self.queue_admission_gating!r} is not one of {', '.join(GATING_MODES)}"
            )
        if self.reservation_ttl <= 0:
            raise ConfigError(f"--reservation-ttl: {self.reservation_ttl} must be positive")
        if self.bind_workers < 1 or self.write_workers < 1:
            raise ConfigError("--bind-workers/--write-workers: must be at least 1")
        for kind in self.suspend_kinds:
            if kind not in c.RAY_KINDS:
                raise ConfigError(f"--suspend-kinds: {kind!r} is not one of {', '.join(c.RAY_KINDS)}")
        for kind, pclass in self.default_priority.items():
            if kind not in c.RAY_KINDS:
                raise ConfigError(f"--default-priority: {kind!r} is not one of {', '.join(c.RAY_KINDS)}")
            if not pclass:
                raise ConfigError(f"--default-priority: {kind}: the PriorityClass name must not be empty")
        if self.drain_deadline < 0:
            raise ConfigError(f"--drain-deadline: {self.drain_deadline} must not be negative")
        if self.max_gang_pods < 1:
            raise ConfigError(f"--max-gang-pods: {self.max_gang_pods} must be at least 1")
        if self.ray_activity_interval < 0:
            raise ConfigError(f"--ray-activity-interval: {self.ray_activity_interval} must not be negative")
        if self.ready_timeout < 0 or self.ready_timeout_backoff < 0:
            raise ConfigError("--ready-timeout/--ready-timeout-backoff: must not be negative")
        if self.headroom_interval < 0:
            raise ConfigError(f"--headroom-interval: {self.headroom_interval} must not be negative")
        self.usage_params()
        return self

    def usage_params(self) -> UsageParams:
        """The usage settings, validated; a bad one raises ConfigError naming its flag. Also checks ``--k-value``,
        ``--usage-db`` and, for Prometheus, its URL and extra parameters."""
        if not self.k_value >= 0:
            raise ConfigError(f"--k-value: {self.k_value:g} must not be negative (0: usage has no effect)")
        if self.usage_db not in CLIENT_TYPES:
            raise ConfigError(f"--usage-db: {self.usage_db!r} is not one of {', '.join(CLIENT_TYPES)}")
        raw = {key: getattr(self, f"usage_{attr}") for key, attr in PARAM_KEYS.items()}  # --usage-<attr>
        try:
            params = usage_params_from(raw, where="usage")
        except UsageConfigError as exc:
            key, _, message = str(exc).removeprefix("usage.").partition(":")
            raise ConfigError(f"--usage-{PARAM_KEYS.get(key, key).replace('_', '-')}:{message}") from None
        if self.usage_db == "prometheus":
            if not self.usage_db_url.startswith(("http://", "https://")):
                raise ConfigError(f"--usage-db-url: {self.usage_db_url!r} is not the http(s) URL of a Prometheus")
            try:
                PrometheusClient(self.usage_db_url, params, self.usage_extra_params)
            except ValueError as exc:
                raise ConfigError(f"--usage-extra-param: {str(exc).removeprefix('extraParams.')}") from None
        elif self.usage_extra_params:
            raise ConfigError("--usage-extra-param: only used with --usage-db=prometheus")
        return params

    def lease(self, operator: str) -> tuple[str, str]:
        pool = f"-{self.node_pool}" if self.node_pool and operator == "scheduler" else ""
        return (self.lease_name or f"kai-ray-{operator}{pool}", self.lease_namespace or default_namespace())

    def pool_selector(self) -> str | None:
        """The label selector of this scheduler's node pool (nodes, Queues, PodGroups); None without pools."""
        if not self.node_pool:
            return None
        if self.node_pool == c.DEFAULT_NODE_POOL:
            return f"!{self.node_pool_label_key}"
        return f"{self.node_pool_label_key}={self.node_pool}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> OperatorConfig:
        """``KAI_RAY_<FIELD>`` variables (``KAI_RAY_NAMESPACES=a,b``, ``KAI_RAY_NODE_SELECTOR=k=v,k2=v2``).

        Used by the kopf entrypoints in ``operators/``, which ``kopf run`` loads without our CLI.
        """
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            values[f.name] = _convert(f.name, f.type, raw)
        values.update(overrides)
        return cls(**values).validate()


def parse_selector(text: str, name: str = "--node-selector") -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ConfigError(f"{name}: {part!r} is not key=value")
        out[key] = value
    return out


def _convert(name: str, typ: Any, raw: str) -> Any:
    t = str(typ)
    where = ENV_PREFIX + name.upper()
    if t.startswith("bool"):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{where}: {raw!r} is not a boolean")
    if t.startswith("int"):
        if raw == "" and "None" in t:
            return None
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{where}: {raw!r} is not an integer") from None
    if t.startswith("float"):
        return duration(raw, where)
    if t.startswith("tuple"):
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    if t.startswith("dict"):
        return parse_selector(raw, where)
    return raw or None if "None" in t else raw
