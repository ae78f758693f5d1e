"""`kai-ray podgroup` as a user runs it: a real subprocess, real files, stdin, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.podgrouper.raydocs import cluster_spec, ray_doc, worker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEMO = ROOT / "kai_ray" / "sim" / "demo" / "scenario.yaml"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kai_ray", *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_multi_document_yaml_to_yaml_and_json(tmp_path):
    docs = [
        ray_doc("RayCluster", cluster_spec(worker("w", 2)), name="a"),
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ignored"}} if False else None,
        ray_doc("RayService", cluster_spec(worker("w", 1)), name="b"),
    ]
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all([d for d in docs if d]))
    out = run("podgroup", "-f", str(f))
    assert out.returncode == 0, out.stderr
    pgs = list(yaml.safe_load_all(out.stdout))
    assert [p["metadata"]["name"] for p in pgs] == ["pg-a-u-1", "pg-b-u-1"]
    assert pgs[0]["apiVersion"] == "scheduling.run.ai/v2alpha2" and pgs[0]["spec"]["minMember"] == 3
    as_json = run("podgroup", "-f", str(f), "-o", "json")
    arr = json.loads(as_json.stdout)
    assert isinstance(arr, list) and [p["spec"]["priorityClassName"] for p in arr] == ["train", "inference"]
    assert run("podgroup", "-f", str(f), "--kai-defaults", "-o", "json").stdout.count('"train"') == 2


def test_stdin():
    out = run("podgroup", "-f", "-", "-o", "json", stdin=yaml.safe_dump(ray_doc("RayJob", cluster_spec(worker("w")))))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["spec"]["subGroups"][-1]["name"] == "submitter"


def _err(stdin: str) -> str:
    out = run("podgroup", "-f", "-", stdin=stdin)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_errors_are_one_line_naming_document_and_field():
    bad_replicas = ray_doc("RayCluster", cluster_spec(worker("w", -1)), name="neg")
    assert "workerGroupSpecs[0].replicas" in _err(yaml.safe_dump(bad_replicas))
    no_head = ray_doc("RayCluster", cluster_spec(worker("w")), name="nohead")
    del no_head["spec"]["headGroupSpec"]
    line = _err(yaml.safe_dump(no_head))
    assert "headGroupSpec" in line and "nohead" in line
    assert "not a Ray CR" in _err(
        yaml.safe_dump({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}})
    )
    assert "(ConfigMap x) is not a Ray CR" in _err("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert "apiVersion: 'ray.io/v9' is not a KubeRay API version" in _err("apiVersion: ray.io/v9\nkind: RayJob\n")
    assert "invalid YAML" in _err("a: [\n")
    line = _err(yaml.safe_dump_all([ray_doc("RayCluster", cluster_spec()), "just a string"]))
    assert "document 2 is a YAML string" in line
    assert "no Ray CR" in _err("")


def test_missing_file_and_bad_output_option(tmp_path):
    out = run("podgroup", "-f", str(tmp_path / "missing.yaml"))
    assert out.returncode != 0 and "cannot read" in out.stderr and "Traceback" not in out.stderr
    f = tmp_path / "ok.yaml"
    f.write_text(yaml.safe_dump(ray_doc("RayCluster", cluster_spec())))
    bad = run("podgroup", "-f", str(f), "-o", "xml")
    assert bad.returncode != 0 and "--output" in bad.stderr


def test_other_documents_are_skipped_with_a_note():
    """The project's own example holds a RayCluster, a Role and a RoleBinding: the RayCluster is grouped."""
    out = run("podgroup", "-f", str(EXAMPLES / "raycluster-kai-autoscaler.yaml"))
    assert out.returncode == 0, out.stderr
    assert [p["kind"] for p in yaml.safe_load_all(out.stdout)] == ["PodGroup"]
    assert out.stderr.splitlines() == [
        f"kai-ray: note: {EXAMPLES / 'raycluster-kai-autoscaler.yaml'} document {n} ({kind}): not a Ray CR; skipped"
        for n, kind in ((2, "Role elastic-kai-kai-ray-autoscaler"), (3, "RoleBinding elastic-kai-kai-ray-autoscaler"))
    ]


def test_unknown_fields_warn_with_a_suggestion_and_bad_quantities_fail():
    doc = ray_doc("RayCluster", cluster_spec(worker("w", 2)), name="typo")
    spec = doc["spec"]
    spec["enableInTreeAutoscalling"] = True
    out = run("podgroup", "-f", "-", stdin=yaml.safe_dump(doc))
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == (
        "kai-ray: warning: <stdin> document 1 (RayCluster typo): spec.enableInTreeAutoscalling: unknown field "
        "(did you mean enableInTreeAutoscaling?); ignored (--strict makes this an error)"
    )
    out = run("podgroup", "-f", "-", "--strict", stdin=yaml.safe_dump(doc))
    assert (out.returncode, out.stdout) == (2, ""), out
    assert out.stderr.strip() == (
        "kai-ray: error: <stdin> document 1 (RayCluster typo): spec.enableInTreeAutoscalling: unknown field "
        "(did you mean enableInTreeAutoscaling?) (--strict)"
    )
    spec.pop("enableInTreeAutoscalling")
    spec["workerGroupSpec"] = spec.pop("workerGroupSpecs")  # every worker group lost: an error without --strict
    out = run("podgroup", "-f", "-", stdin=yaml.safe_dump(doc))
    assert (out.returncode, out.stdout) == (2, ""), out
    assert out.stderr.strip() == (
        "kai-ray: error: <stdin> document 1 (RayCluster typo): spec.workerGroupSpec: unknown field "
        "(did you mean workerGroupSpecs?); without workerGroupSpecs the cluster is its head alone"
    )
    doc = ray_doc("RayCluster", cluster_spec(worker("w", 2)), name="eight")
    ctr = doc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    ctr["resources"] = {"limits": {"nvidia.com/gpu": "eight"}}
    line = _err(yaml.safe_dump(doc))
    assert "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]" in line
    assert "'eight' is not a quantity" in line


def test_a_scenario_file_says_what_it_is():
    line = _err(DEMO.read_text())
    assert "is a kai-ray simulator scenario, not a Kubernetes manifest" in line and "kai-ray simulate" in line
