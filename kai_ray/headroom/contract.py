"""The headroom contract between the scheduler and the Ray autoscaler hook, and the capping rule.

Why a published number: the Ray autoscaler sizes worker groups from Ray's logical demand only; it cannot know that the
queue is at its limit or that the gang's fair share is used up, so it asks for pods that then sit Pending forever (or
until autoscaler v2 kills and re-requests them). The scheduler knows, so it publishes on each autoscaling PodGroup
how many more pods of each subgroup it would place *now*; the hook never asks beyond that, nor beyond the group's max.

Wire format (annotation :data:`HEADROOM_ANNOTATION` on the PodGroup, written by the scheduler)::

    {"at": "2026-01-01T00:00:00Z",
     "subgroups": {"<subgroup>": {"pods": 2, "headroom": 3}}}

``pods`` is the number of the subgroup's pods the scheduler counted (not terminating, pending included) and
``headroom`` how many pods beyond those it would place now; it is negative when some counted pods cannot be placed.
The hook allows the subgroup ``pods + headroom`` pods in total: a total, not a delta, so pods created after the
scheduler wrote the number are not counted twice. ``at`` lets the hook treat an old number as unknown.

Pure: no Ray, no Kubernetes client, no scheduler imports (the sidecar stays light).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray import constants as c
from kai_ray.durations import parse_rfc3339, rfc3339
from kai_ray.podgrouper.naming import subgroup_name

log = logging.getLogger(__name__)

HEADROOM_ANNOTATION = "kai-ray.io/headroom"

# Why a request was capped (CapDecision.code); the Event reason is always SCALE_UP_CAPPED.
SCALE_UP_CAPPED = "ScaleUpCapped"
QUEUE_HEADROOM = "QueueHeadroom"
GROUP_MAX = "GroupMax"
HEADROOM_UNKNOWN = "HeadroomUnknown"
HEADROOM_STALE = "HeadroomStale"
PODGROUP_UNKNOWN = "PodGroupUnknown"
NOT_CAPPED = ""

MISSING_DENY = "deny"  # no (or stale) headroom: no scale-up
MISSING_ALLOW = "allow"  # no (or stale) headroom: only the group's max applies


class HeadroomError(ValueError):
    """A malformed headroom annotation; the message names the field."""


@dataclass(frozen=True)
class SubgroupHeadroom:
    pods: int
    headroom: int

    @property
    def allowed(self) -> int:
        """Total pods the subgroup may have now."""
        return max(0, self.pods + self.headroom)


@dataclass(frozen=True)
class Headroom:
    at: float | None  # epoch seconds
    subgroups: dict[str, SubgroupHeadroom] = field(default_factory=dict)


def format_headroom(subgroups: Mapping[str, SubgroupHeadroom], now: float | None = None) -> str:
    body = {
        "at": rfc3339(now),
        "subgroups": {k: {"pods": v.pods, "headroom": v.headroom} for k, v in sorted(subgroups.items())},
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def headroom_annotations(subgroups: Mapping[str, SubgroupHeadroom], now: float | None = None) -> dict[str, str]:
    """The metadata.annotations merge-patch body the scheduler writes onto a PodGroup."""
    return {HEADROOM_ANNOTATION: format_headroom(subgroups, now)}


def parse_headroom(text: str) -> Headroom:
    where = f"metadata.annotations[{HEADROOM_ANNOTATION}]"
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise HeadroomError(f"{where}: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise HeadroomError(f"{where}: must be a JSON object")
    at: float | None = None
    if body.get("at") is not None:
        try:
            at = parse_rfc3339(str(body["at"]))
        except ValueError:
            raise HeadroomError(f"{where}.at: {body['at']!r} is not an RFC 3339 time") from None
    subs = body.get("subgroups", {})
    if not isinstance(subs, dict):
        raise HeadroomError(f"{where}.subgroups: must be an object of subgroup -> {{pods, headroom}}")
    out: dict[str, SubgroupHeadroom] = {}
    for name, entry in subs.items():
        if not isinstance(entry, dict):
            raise HeadroomError(f"{where}.subgroups.{name}: must be an object with pods and headroom")
        try:
            pods, room = entry["pods"], entry["headroom"]
            if isinstance(pods, bool) or isinstance(room, bool) or int(pods) != pods or int(room) != room:
                raise ValueError
            out[str(name)] = SubgroupHeadroom(int(pods), int(room))
        except (KeyError, TypeError, ValueError):
            raise HeadroomError(f"{where}.subgroups.{name}: pods and headroom must be integers") from None
        if out[str(name)].pods < 0:
            raise HeadroomError(f"{where}.subgroups.{name}.pods: must be >= 0")
    return Headroom(at, out)


@dataclass(frozen=True)
class GroupLimits:
    """What the hook reads from one PodGroup: the published headroom and the per-subgroup pod ceilings."""

    podgroup: str
    headroom: Headroom | None = None
    headroom_error: str | None = None
    subgroup_max: dict[str, int] = field(default_factory=dict)
    subgroup_names: dict[str, str] = field(default_factory=dict)  # Ray group name -> subgroup (non-DNS names)

    def subgroup_for(self, group: str) -> str:
        return self.subgroup_names.get(group) or subgroup_name(group)


def limits_from_podgroup(pg: Mapping[str, Any]) -> GroupLimits:
    meta = pg.get("metadata") or {}
    ann = meta.get("annotations") or {}
    name = str(meta.get("name") or "")
    headroom: Headroom | None = None
    error: str | None = None
    if HEADROOM_ANNOTATION in ann:
        try:
            headroom = parse_headroom(str(ann[HEADROOM_ANNOTATION]))
        except HeadroomError as exc:
            error = str(exc)
    sub_max: dict[str, int] = {}
    names: dict[str, str] = {}
    try:
        sub_max = {str(k): int(v) for k, v in json.loads(ann.get(c.SUBGROUP_MAX, "{}")).items()}
        names = {str(k): str(v) for k, v in json.loads(ann.get(c.SUBGROUP_NAMES, "{}")).items()}
    except (ValueError, TypeError, AttributeError):
        error = error or f"metadata.annotations[{c.SUBGROUP_MAX}]: not a JSON map of integers"
    return GroupLimits(name, headroom, error, sub_max, names)


@dataclass(frozen=True)
class CapDecision:
    """The outcome for one worker group of one scale request. Counts are pods (replicas x numOfHosts)."""

    group: str
    subgroup: str
    current: int
    requested: int
    allowed: int
    code: str = NOT_CAPPED
    message: str = ""

    @property
    def capped(self) -> bool:
        return self.allowed < self.requested

    def event(self, involved: Mapping[str, Any], component: str = "kai-ray-autoscaler") -> dict[str, Any]:
        """A core/v1 Event body (Warning, reason ``ScaleUpCapped``) about ``involved`` (an object reference)."""
        now = rfc3339()
        ns = str(involved.get("namespace") or "default")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved.get('name', 'raycluster')}.", "namespace": ns},
            "involvedObject": dict(involved),
            "type": "Warning",
            "reason": SCALE_UP_CAPPED,
            "message": self.message[:1024],
            "source": {"component": component},
            "reportingComponent": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }


def cap_scale_up(
    limits: GroupLimits | None,
    group: str,
    current: int,
    requested: int,
    hosts: int = 1,
    *,
    now: float | None = None,
    max_age_s: float = 300.0,
    missing: str = MISSING_DENY,
) -> CapDecision:
    """Cap a worker group's requested pod count by the published headroom and the subgroup's max.

    Never lowers below ``current`` (scale-downs are the autoscaler's business) and keeps whole multi-host replicas.
    With no PodGroup, no headroom, a malformed one, or one older than ``max_age_s`` (0 disables the check), the
    ``missing`` policy decides: ``deny`` allows no scale-up, ``allow`` lets only the max apply.
    """
    hosts = max(1, hosts)
    sub = limits.subgroup_for(group) if limits else subgroup_name(group)
    if requested <= current:
        return CapDecision(group, sub, current, requested, requested)
    now = time.time() if now is None else now
    ceilings: list[tuple[int, str, str]] = []
    if limits is not None and sub in limits.subgroup_max:
        ceilings.append((limits.subgroup_max[sub], GROUP_MAX, f"the group's max of {limits.subgroup_max[sub]} pods"))
    unknown: tuple[str, str] | None = None
    if limits is None:
        unknown = (PODGROUP_UNKNOWN, "its PodGroup could not be read")
    elif limits.headroom_error:
        unknown = (HEADROOM_UNKNOWN, limits.headroom_error)
    elif limits.headroom is None:
        unknown = (HEADROOM_UNKNOWN, f"PodGroup {limits.podgroup} has no {HEADROOM_ANNOTATION} yet")
    elif max_age_s > 0 and (limits.headroom.at is None or now - limits.headroom.at > max_age_s):
        age = "unknown" if limits.headroom.at is None else f"{now - limits.headroom.at:.0f}s"
        unknown = (
            HEADROOM_STALE,
            f"the headroom on PodGroup {limits.podgroup} is too old (age {age} > {max_age_s:.0f}s)",
        )
    else:
        entry = limits.headroom.subgroups.get(sub)
        if entry is None:
            unknown = (HEADROOM_UNKNOWN, f"PodGroup {limits.podgroup} publishes no headroom for subgroup {sub}")
        else:
            ceilings.append(
                (
                    entry.allowed,
                    QUEUE_HEADROOM,
                    f"the queue's headroom ({entry.headroom:+d} beyond {entry.pods} pods, so {entry.allowed} in total)",
                )
            )
    if unknown is not None and missing != MISSING_ALLOW:
        ceilings.append((current, unknown[0], unknown[1]))
    if not ceilings:
        return CapDecision(group, sub, current, requested, requested)
    limit, code, why = min(ceilings, key=lambda t: t[0])
    allowed = max(current, min(requested, (limit // hosts) * hosts))
    if allowed >= requested:
        return CapDecision(group, sub, current, requested, requested)
    msg = (
        f"worker group {group}: scale-up to {requested} pods capped at {allowed} ({current} now) by {why}"
        if allowed > current
        else f"worker group {group}: scale-up to {requested} pods refused ({current} now) by {why}"
    )
    return CapDecision(group, sub, current, requested, allowed, code, msg)


class HeadroomGate:
    """Reads a PodGroup at most every ``refresh_s`` and caps scale requests; reports each new cap once.

    ``fetch`` returns the PodGroup dict (or None when it cannot be read); ``report`` receives each decision whose
    (group, code, allowed) changed or that was last reported more than ``repeat_s`` ago: log it, post an Event.
    """

    def __init__(
        self,
        fetch: Callable[[], Mapping[str, Any] | None],
        *,
        max_age_s: float = 300.0,
        missing: str = MISSING_DENY,
        refresh_s: float = 1.0,
        repeat_s: float = 60.0,
        report: Callable[[CapDecision], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if missing not in (MISSING_DENY, MISSING_ALLOW):
            raise ValueError(f"missing: {missing!r} is not {MISSING_DENY!r} or {MISSING_ALLOW!r}")
        self.fetch = fetch
        self.max_age_s = max_age_s
        self.missing = missing
        self.refresh_s = refresh_s
        self.repeat_s = repeat_s
        self.report = report
        self.clock = clock
        self._limits: GroupLimits | None = None
        self._read_at = float("-inf")
        self._reported: dict[str, tuple[str, int, float]] = {}
        self.decisions: list[CapDecision] = []  # every capped decision, newest last (bounded)

    def limits(self, force: bool = False) -> GroupLimits | None:
        now = self.clock()
        if force or now - self._read_at >= self.refresh_s:
            try:
                pg = self.fetch()
            except Exception as exc:  # never let a read failure crash the autoscaler loop
                log.warning("kai-ray: reading the PodGroup failed: %s", exc)
                pg = None
            self._limits = limits_from_podgroup(pg) if pg else None
            self._read_at = now
        return self._limits

    def cap(self, group: str, current: int, requested: int, hosts: int = 1) -> CapDecision:
        if requested <= current:
            return CapDecision(group, group, current, requested, requested)
        d = cap_scale_up(
            self.limits(),
            group,
            current,
            requested,
            hosts,
            now=self.clock(),
            max_age_s=self.max_age_s,
            missing=self.missing,
        )
        if d.capped:
            self.decisions.append(d)
            del self.decisions[:-100]
            self._maybe_report(d)
        return d

    def _maybe_report(self, d: CapDecision) -> None:
        now = self.clock()
        last = self._reported.get(d.group)
        if last is not None and last[0] == d.code and last[1] == d.allowed and now - last[2] < self.repeat_s:
            return
        self._reported[d.group] = (d.code, d.allowed, now)
        log.warning("kai-ray: %s", d.message)
        if self.report is not None:
            try:
                self.report(d)
            except Exception as exc:
                log.info("kai-ray: reporting a capped scale-up failed: %s", exc)
