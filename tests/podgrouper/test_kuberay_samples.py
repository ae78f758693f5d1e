"""Run the podgrouper over KubeRay's own sample manifests, fetched at test time from the Go module proxy.

The samples are never committed: ``go mod download`` puts the ray-operator module (which ships
``config/samples/*.yaml``) into the Go module cache. The expected gang size is recomputed here from the raw
manifests with KubeRay's and KAI's documented rules, independently of the podgrouper's own helpers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kai_ray import constants as c
from kai_ray.api import ManifestError, RayCluster, RayJob, RayService, parse_object
from kai_ray.podgrouper import GroupingError, group
from kai_ray.testing.controlplane import build

MAXINT = 2**31 - 1


@pytest.fixture(scope="module")
def samples() -> list[Path]:
    try:
        root = build.module_dir(build.KUBERAY_MODULE, build.KUBERAY_VERSION)
    except Exception as exc:  # pragma: no cover - only without Go or the proxy
        pytest.fail(f"cannot download {build.KUBERAY_MODULE}@{build.KUBERAY_VERSION}: {exc}")
    files = sorted((root / "config" / "samples").glob("*.yaml"))
    assert len(files) > 30, "expected KubeRay's sample manifests in the module"
    return files


def expected(spec: dict) -> tuple[int, int, dict[str, int]]:
    auto = spec.get("enableInTreeAutoscaling") is True
    minimum, ceiling, groups = 1, 1, {}
    for wg in spec.get("workerGroupSpecs") or []:
        lo, hi = wg.get("minReplicas", 0), wg.get("maxReplicas", MAXINT)
        reps = wg.get("replicas", 0)
        hosts = wg.get("numOfHosts", 1) or 1
        if wg.get("suspend") or (reps == 0 and lo == 0 and not (auto and hi > 0)):
            continue
        desired = min(hi, max(lo, reps)) if lo <= hi else hi
        gmin = (min(lo, hi) if lo > 0 else desired) * hosts
        groups[wg["groupName"]] = gmin
        minimum += gmin
        ceiling += max(min(hi * hosts, MAXINT) if auto else desired * hosts, gmin)
    return minimum, min(ceiling, MAXINT), groups


def test_every_kuberay_sample_follows_the_rules(samples):
    checked: dict[str, list[str]] = {}
    for path in samples:
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("apiVersion", "").split("/")[0] != "ray.io":
                continue
            if doc.get("kind") not in ("RayCluster", "RayJob", "RayService"):
                checked.setdefault(f"skipped {doc.get('kind')} (creates RayJobs, grouped through them)", []).append(
                    path.name
                )
                continue
            meta = doc.setdefault("metadata", {})
            meta["uid"] = "uid-1"
            meta.setdefault("name", meta.get("generateName", "generated").rstrip("-"))
            try:
                obj = parse_object(doc, path.name)
            except ManifestError as exc:  # pragma: no cover - would be a model bug
                pytest.fail(f"{path.name}: {exc}")
            assert isinstance(obj, RayCluster | RayJob | RayService)
            raw = doc["spec"]
            spec = {"RayCluster": raw, "RayJob": raw.get("rayClusterSpec"), "RayService": raw.get("rayClusterConfig")}[
                obj.kind
            ]
            if spec is None:
                with pytest.raises(GroupingError):
                    group(obj)
                checked.setdefault("rejected (clusterSelector)", []).append(path.name)
                continue
            pg = group(obj)
            minimum, ceiling, groups = expected(spec)
            sub_mins = {sg.name: sg.min_member for sg in pg.spec.sub_groups}
            assert pg.spec.min_member == minimum, path.name
            assert int(pg.metadata.annotations[c.MAX_MEMBER]) == ceiling, path.name
            assert sub_mins["headgroup"] == 1
            for name, gmin in groups.items():
                assert sub_mins[name] == gmin, (path.name, name)
            assert pg.validate_spec() == [], path.name
            labels = doc["metadata"].get("labels") or {}
            assert pg.spec.queue == labels.get(c.QUEUE_LABEL, "default-queue"), path.name
            default = {"RayService": "inference", "RayJob": "train", "RayCluster": "train"}[obj.kind]
            if not any(k in labels for k in (c.PRIORITY_LABEL, c.RAY_PRIORITY_LABEL)) and not (
                spec["headGroupSpec"]["template"]["spec"].get("priorityClassName")
            ):
                assert pg.spec.priority_class_name == default, path.name
            assert json.loads(pg.metadata.annotations[c.SUBGROUP_MAX])["headgroup"] == 1
            checked.setdefault(obj.kind, []).append(path.name)
    assert len(checked.get("RayCluster", [])) >= 20
    assert len(checked.get("RayJob", [])) >= 5
    assert len(checked.get("RayService", [])) >= 5
    print(json.dumps(checked, indent=1))
