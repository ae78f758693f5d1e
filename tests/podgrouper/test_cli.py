"""`kai-ray podgroup` as a user runs it: a real subprocess, real files, stdin, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.podgrouper.raydocs import cluster_spec, ray_doc, worker


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
    assert "unsupported apiVersion/kind" in _err("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert "invalid YAML" in _err("a: [\n")
    assert "document 2" in _err(yaml.safe_dump_all([ray_doc("RayCluster", cluster_spec()), "just a string"]))
    assert "no Ray CR" in _err("")


def test_missing_file_and_bad_output_option(tmp_path):
    out = run("podgroup", "-f", str(tmp_path / "missing.yaml"))
    assert out.returncode != 0 and "cannot read" in out.stderr and "Traceback" not in out.stderr
    f = tmp_path / "ok.yaml"
    f.write_text(yaml.safe_dump(ray_doc("RayCluster", cluster_spec())))
    bad = run("podgroup", "-f", str(f), "-o", "xml")
    assert bad.returncode != 0 and "--output" in bad.stderr
