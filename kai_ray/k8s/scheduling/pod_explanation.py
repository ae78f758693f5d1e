"""``kai-ray explain``: why a pod or PodGroup is pending, where it runs, and who preempted it - read from the cluster.

Everything comes from what the operators wrote: the PodGroup's ``Scheduled`` and ``Evicted`` conditions and KAI's
``schedulingConditions``, the queue's status, and the Events on the PodGroup and its pods. A name is looked up as a
pod, then as a PodGroup, then as the owner a PodGroup was made for (``pg-<owner>-<uid>``, e.g. a RayJob's name).

An upstream Kubernetes PodGroup (``scheduling.k8s.io/v1beta1``, named by the pod's ``spec.schedulingGroup``) carries
no kai-ray status: its queue, priority, ``minCount`` and ``disruptionMode`` are shown as kai-ray reads them, and the
verdict is the last ``Unschedulable`` Event kai-ray put on its pods.
"""

from __future__ import annotations

from typing import Any

from kai_ray import constants as c
from kai_ray.k8s.base.rest import ApiError, Kube, events_path, podgroups_path, pods_path, queues_path
from kai_ray.k8s.scheduling import upstream_gangs
from kai_ray.podgrouper.defaultgrouper import own_group_name


class ExplainError(LookupError):
    """Nothing to explain: the message says what was looked for."""


def _get(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = kube.get(path)
        return obj
    except ApiError as exc:
        if exc.not_found:
            return None
        raise


def _cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def find_podgroup(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    pg = _get(kube, podgroups_path(ns, name))
    if pg is not None:
        return pg
    for item in kube.get(podgroups_path(ns)).get("items") or []:
        pg_name = item["metadata"]["name"]
        if pg_name.startswith(f"pg-{name}-"):
            result: dict[str, Any] = item
            return result
    return None


def _pod_group(meta: dict[str, Any]) -> str | None:
    """The stamp, or (before the podgrouper writes it) the group a pod that is its own top owner always gets."""
    return (meta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION) or own_group_name(meta)


def _upstream(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    """An upstream PodGroup, or None where there is none or the server does not serve them."""
    try:
        return _get(kube, upstream_gangs.podgroups_path(ns, name))
    except ApiError as exc:
        if exc.status in (403, 404):
            return None
        raise


def _upstream_facts(kube: Kube, ns: str, pg: dict[str, Any], members: list[dict[str, Any]]) -> dict[str, Any]:
    """An upstream PodGroup as kai-ray reads it (:mod:`kai_ray.k8s.scheduling.upstream_gangs`)."""
    meta, spec = pg.get("metadata") or {}, pg.get("spec") or {}
    queue = (meta.get("labels") or {}).get(c.QUEUE_LABEL)
    wl = upstream_gangs.workload_name(pg)
    if not queue and wl:
        workload = _get(kube, upstream_gangs.workloads_path(ns, wl))
        queue = (((workload or {}).get("metadata") or {}).get("labels") or {}).get(c.QUEUE_LABEL)
    if not queue:
        queue = next((q for p in members if (q := (p["metadata"].get("labels") or {}).get(c.QUEUE_LABEL))), None)
    gang = (spec.get("schedulingPolicy") or {}).get("gang") or {}
    mode = spec.get("disruptionMode") or {}
    return {
        "name": meta.get("name"),
        "apiVersion": upstream_gangs.VERSION,
        "queue": queue or c.DEFAULT_QUEUE,
        "priorityClassName": spec.get("priorityClassName"),
        "priority": spec.get("priority"),
        "minMember": gang.get("minCount", 1),
        "disruptionMode": "All" if "all" in mode else "Single",
        "workload": wl,
        "subGroups": [],
        "scheduled": None,
        "evicted": None,
        "schedulingConditions": [],
        "pods": {"total": len(members), "bound": sum(1 for p in members if (p.get("spec") or {}).get("nodeName"))},
    }


def explain_data(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    """The facts ``explain`` prints, as a dict (``kai-ray explain -o json``)."""
    out: dict[str, Any] = {"namespace": ns, "name": name}
    pod = _get(kube, pods_path(ns, name))
    pg: dict[str, Any] | None = None
    if pod is not None:
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        out["pod"] = {
            "name": name,
            "node": spec.get("nodeName"),
            "phase": (pod.get("status") or {}).get("phase"),
            "schedulerName": spec.get("schedulerName"),
            "podGroup": upstream_gangs.pod_group_name(spec)
            or (meta.get("annotations") or {}).get(c.PODGROUP_ANNOTATION),
            "subGroup": (meta.get("labels") or {}).get(c.SUBGROUP_LABEL),
            "terminating": bool(meta.get("deletionTimestamp")),
        }
        if upstream_gangs.pod_group_name(spec):
            pg = _upstream(kube, ns, out["pod"]["podGroup"])
        elif out["pod"]["podGroup"]:
            pg = _get(kube, podgroups_path(ns, out["pod"]["podGroup"]))
        elif (own := own_group_name(meta)) is not None:
            pg = _get(kube, podgroups_path(ns, own))  # before the podgrouper's stamp
            out["pod"]["podGroup"] = own if pg is not None else None
    else:
        pg = find_podgroup(kube, ns, name) or _upstream(kube, ns, name)
        if pg is None:
            raise ExplainError(f"no pod, PodGroup or PodGroup owner named {name!r} in namespace {ns!r}")
    all_events = kube.get(events_path(ns)).get("items") or []
    if pg is not None and pg.get("apiVersion") == upstream_gangs.VERSION:
        pg_name = pg["metadata"]["name"]
        members = [
            p for p in kube.get(pods_path(ns)).get("items") or [] if upstream_gangs.pod_group_name(p["spec"]) == pg_name
        ]
        out["podGroup"] = _upstream_facts(kube, ns, pg, members)
        out["queue"] = _queue(kube, out["podGroup"]["queue"])
        names = {pg_name} | {p["metadata"]["name"] for p in members}
    elif pg is not None:
        pg_name = pg["metadata"]["name"]
        spec = pg.get("spec") or {}
        status = pg.get("status") or {}
        members = [p for p in kube.get(pods_path(ns)).get("items") or [] if _pod_group(p["metadata"]) == pg_name]
        out["podGroup"] = {
            "name": pg_name,
            "queue": spec.get("queue"),
            "priorityClassName": spec.get("priorityClassName"),
            "preemptibility": spec.get("preemptibility"),
            "minMember": spec.get("minMember"),
            "subGroups": [(sg.get("name"), sg.get("minMember")) for sg in spec.get("subGroups") or []],
            "phase": status.get("phase"),
            "scheduled": _cond(pg, "Scheduled"),
            "evicted": _cond(pg, "Evicted"),
            "schedulingConditions": status.get("schedulingConditions") or [],
            "lastStart": (pg["metadata"].get("annotations") or {}).get(c.LAST_START),
            "lastEviction": (pg["metadata"].get("annotations") or {}).get(c.LAST_EVICTION),
            "pods": {
                "total": len(members),
                "bound": sum(1 for p in members if (p.get("spec") or {}).get("nodeName")),
            },
        }
        if spec.get("queue"):
            out["queue"] = _queue(kube, spec["queue"])
        names = {pg_name} | {p["metadata"]["name"] for p in members}
    else:
        names = {name}
    if pod is not None:
        names.add(name)
    evs = [e for e in all_events if (e.get("involvedObject") or {}).get("name") in names]
    evs.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    out["events"] = [
        {
            "object": f"{e['involvedObject'].get('kind')}/{e['involvedObject'].get('name')}",
            "type": e.get("type"),
            "reason": e.get("reason"),
            "message": e.get("message"),
            "count": e.get("count", 1),
            "time": e.get("lastTimestamp") or e.get("eventTime"),
        }
        for e in evs[-20:]
    ]
    out["summary"] = summary(out)
    return out


def _queue(kube: Kube, name: str) -> dict[str, Any]:
    q = _get(kube, queues_path(name))
    if q is None:
        return {"name": name, "exists": False}
    return {
        "name": name,
        "exists": True,
        "gpuQuota": ((q.get("spec") or {}).get("resources") or {}).get("gpu", {}).get("quota"),
        "gpuLimit": ((q.get("spec") or {}).get("resources") or {}).get("gpu", {}).get("limit"),
        "status": {k: v for k, v in (q.get("status") or {}).items() if k != "conditions"},
        "valid": _cond(q, "Valid"),
    }


def summary(data: dict[str, Any]) -> str:
    pod = data.get("pod")
    pg = data.get("podGroup")
    if pod is not None and pod.get("node") and not pod.get("terminating"):
        return f"pod {data['namespace']}/{pod['name']} is bound to node {pod['node']} ({pod.get('phase') or 'Pending'})"
    if pod is not None and pod.get("terminating"):
        return f"pod {data['namespace']}/{pod['name']} is being deleted{_evicted_suffix(pg)}"
    if pod is not None and pod.get("schedulerName") != c.SCHEDULER_NAME and not pg:
        return (
            f"pod {data['namespace']}/{pod['name']} is not for kai-scheduler (schedulerName {pod.get('schedulerName')})"
        )
    if pod is not None and not pod.get("podGroup"):
        return "pending: the podgrouper has not assigned a PodGroup yet (no pod-group-name annotation)"
    if pg is None:
        return f"pending: its PodGroup {pod.get('podGroup') if pod else '?'} does not exist"
    sched = pg.get("scheduled")
    if pg.get("apiVersion") == upstream_gangs.VERSION:
        said = [e for e in data.get("events") or [] if e.get("reason") == "Unschedulable"]
        if said:
            return f"pending: {said[-1].get('message')}"
        return f"PodGroup {pg['name']} ({upstream_gangs.VERSION}): no verdict from the scheduler yet"
    if sched is None:
        return f"PodGroup {pg['name']}: no verdict from the scheduler yet{_evicted_suffix(pg)}"
    if sched.get("status") == "True":
        return (
            f"PodGroup {pg['name']} is scheduled ({sched.get('reason')}): {sched.get('message')}{_evicted_suffix(pg)}"
        )
    return f"pending: {sched.get('reason')}: {sched.get('message')}{_evicted_suffix(pg)}"


def _evicted_suffix(pg: dict[str, Any] | None) -> str:
    ev = (pg or {}).get("evicted")
    if not ev:
        return ""
    return f"; last eviction {ev.get('lastTransitionTime')}: {ev.get('reason')}: {ev.get('message')}"


def render(data: dict[str, Any]) -> str:
    lines = [data["summary"]]
    pod = data.get("pod")
    if pod is not None:
        lines.append(
            f"pod: {pod['name']}  node={pod.get('node') or '-'}  phase={pod.get('phase') or '-'}  "
            f"podGroup={pod.get('podGroup') or '-'}  subGroup={pod.get('subGroup') or '-'}"
        )
    pg = data.get("podGroup")
    if pg is not None:
        if pg.get("apiVersion") == upstream_gangs.VERSION:
            lines.append(
                f"podgroup ({upstream_gangs.VERSION}): {pg['name']}  queue={pg.get('queue')}  "
                f"priority={pg.get('priority')}"
                f" ({pg.get('priorityClassName') or '-'})  minCount={pg.get('minMember')}  "
                f"disruptionMode={pg.get('disruptionMode')}  pods bound {pg['pods']['bound']}/{pg['pods']['total']}"
            )
        else:
            lines.append(
                f"podgroup: {pg['name']}  queue={pg.get('queue')}  priority={pg.get('priorityClassName')}  "
                f"minMember={pg.get('minMember')}  pods bound {pg['pods']['bound']}/{pg['pods']['total']}"
            )
        for cond in (pg.get("scheduled"), pg.get("evicted")):
            if cond:
                lines.append(
                    f"  {cond.get('type')}={cond.get('status')} {cond.get('reason')} "
                    f"(since {cond.get('lastTransitionTime')}): {cond.get('message')}"
                )
        for sc in pg.get("schedulingConditions") or []:
            for r in sc.get("reasons") or []:
                qd = (r.get("details") or {}).get("queueDetails")
                extra = f"  queue details: {qd}" if qd else ""
                lines.append(f"  {sc.get('type')} [{sc.get('nodePool')}]: {r.get('reason')}: {r.get('message')}{extra}")
    q = data.get("queue")
    if q is not None:
        if not q.get("exists"):
            lines.append(f"queue: {q['name']} does not exist")
        else:
            st = q.get("status") or {}
            valid = q.get("valid") or {}
            lines.append(
                f"queue: {q['name']}  gpu quota={q.get('gpuQuota')} limit={q.get('gpuLimit')}  "
                f"allocated={st.get('allocated', {}).get(c.GPU_RESOURCE, '-')}  "
                f"fairShare={st.get('fairShare', {}).get(c.GPU_RESOURCE, '-')}  "
                f"requested={st.get('requested', {}).get(c.GPU_RESOURCE, '-')}"
                + (f"  INVALID: {valid.get('message')}" if valid.get("status") == "False" else "")
            )
    if data.get("events"):
        lines.append("events:")
        for e in data["events"]:
            count = f" (x{e['count']})" if e.get("count", 1) > 1 else ""
            lines.append(f"  {e['time']}  {e['type']:<7} {e['reason']:<16} {e['object']}: {e['message']}{count}")
    return "\n".join(lines)


def explain(kube: Kube, ns: str, name: str) -> str:
    return render(explain_data(kube, ns, name))
