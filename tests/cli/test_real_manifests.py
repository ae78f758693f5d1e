"""Real manifests in: what ``kubectl get -o yaml`` writes (a ``List`` of objects) is read item by item, and inputs
that would make the reader run away (``/dev/zero``, YAML nested thousands deep) are one-line errors, never an
endless read or a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kai_ray.api.loader import MAX_DEPTH, ManifestError, load_documents
from kai_ray.cli import main

ROOT = Path(__file__).resolve().parents[2]
RAYJOB = ROOT / "examples" / "rayjob-training.yaml"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _rayjobs() -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(RAYJOB.read_text()) if d and d.get("kind") == "RayJob"]


@pytest.mark.parametrize("kind", ["List", "RayJobList"])
def test_a_list_is_read_item_by_item(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (job,) = _rayjobs()
    second = {**job, "metadata": {**job["metadata"], "name": "second"}}  # type: ignore[dict-item]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": []}
    listed = {"apiVersion": "v1", "kind": kind, "metadata": {}, "items": [job, second, role]}
    path = tmp_path / "listed.yaml"
    path.write_text(yaml.safe_dump(listed))
    code, out, err = _run(["podgroup", "-f", str(path), "-o", "json"], capsys)
    assert code == 0, err
    assert out.count('"kind": "PodGroup"') == 2
    assert f"document 1 ({kind}) item 3 (Role r): not a Ray CR; skipped" in err


def test_dev_zero_is_refused_not_read_forever(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["podgroup", "-f", "/dev/zero"], capsys)
    assert code == 2 and "/dev/zero: larger than 64 MiB; not read" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "message"), [("[" * 20000, "nested deeper than Python can read"), (None, "nested more than")]
)
def test_deep_nesting_is_one_line(
    text: str | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if text is None:
        text = "a: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError, match=message):
        list(load_documents(text, str(path)))
    code, _, err = _run(["podgroup", "-f", str(path)], capsys)
    assert code == 2 and message in err and "Traceback" not in err and err.count("\n") == 1


def _variant(tmp_path: Path, change: object, name: str = "variant") -> Path:
    (job,) = _rayjobs()
    doc = yaml.safe_load(yaml.safe_dump(job))
    change(doc)  # type: ignore[operator]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _worker(doc: dict) -> dict:  # type: ignore[type-arg]
    return doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["metadata"].update(name="Train_LLM"), "metadata.name: 'Train_LLM' is not a valid name"),
        (lambda d: d["metadata"].update(name="a" * 254), "at most 253 characters"),
        (lambda d: _worker(d).pop("groupName"), "workerGroupSpecs[0].groupName: missing"),
        (lambda d: _worker(d).update(replicas=True), "workerGroupSpecs[0].replicas: true is not a whole number"),
        (
            lambda d: d.update(apiVersion="ray.io/v2"),
            "apiVersion: 'ray.io/v2' is not a KubeRay API version (ray.io/v1)",
        ),
        (
            lambda d: d["spec"]["rayClusterSpec"].update(
                workerGroupSpec=d["spec"]["rayClusterSpec"].pop("workerGroupSpecs")
            ),
            "spec.rayClusterSpec.workerGroupSpec: unknown field (did you mean workerGroupSpecs?); without "
            "workerGroupSpecs the cluster is its head alone",
        ),
        (
            lambda d: d["spec"]["rayClusterSpec"].update(workers=d["spec"]["rayClusterSpec"].pop("workerGroupSpecs")),
            "spec.rayClusterSpec.workers: unknown field (did you mean workerGroupSpecs?)",
        ),
        (
            lambda d: _worker(d)["template"]["spec"]["containers"][0].update(
                resources={"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}
            ),
            "requests[nvidia.com/gpu]: '1' without a limit",
        ),
    ],
)
def test_what_kubernetes_or_kuberay_would_refuse_is_refused(
    change: object, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["podgroup", "-f", str(_variant(tmp_path, change))], capsys)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_a_suspended_rayjob_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, lambda d: d["spec"].update(suspend=True))
    code, out, err = _run(["podgroup", "-f", str(path)], capsys)
    assert code == 0 and "kind: PodGroup" in out
    assert "spec.suspend is true: KubeRay creates no pods until it is resumed" in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["metadata"]["labels"].update({"kai.scheduler/queu": "x"}),
            "metadata.labels[kai.scheduler/queu]: not a key KAI or kai-ray reads (did you mean kai.scheduler/queue?); "
            "ignored",
        ),
        (
            lambda d: d["metadata"].update(annotations={"kai.schedular/topology": "rack"}),
            "metadata.annotations[kai.schedular/topology]: not a key KAI or kai-ray reads (did you mean "
            "kai.scheduler/topology?)",
        ),
        (
            lambda d: d["metadata"]["labels"].update(priorityClassName="trian"),
            "metadata.labels[priorityClassName]: 'trian' is not a PriorityClass (did you mean train?); the gang would "
            "get the default priority 50 (--strict makes this an error)",
        ),
        (
            lambda d: _worker(d)["template"]["spec"].update(priorityClassName="inferense"),
            "workerGroupSpecs[0].template.spec.priorityClassName: 'inferense' is not a PriorityClass (did you mean "
            "inference?)",
        ),
    ],
)
def test_a_typo_in_a_name_kai_reads_is_a_warning_with_did_you_mean(
    change: object, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _variant(tmp_path, change)
    code, out, err = _run(["podgroup", "-f", str(path)], capsys)
    assert code == 0 and "kind: PodGroup" in out and message in err and err.count("\n") == 1, err
    code, _, err = _run(["podgroup", "-f", str(path), "--strict"], capsys)
    assert code == 2 and message.split(";")[0] in err


def test_a_class_the_cluster_may_define_is_not_second_guessed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _variant(tmp_path, lambda d: d["metadata"]["labels"].update(priorityClassName="team-critical"))
    code, _, err = _run(["podgroup", "-f", str(path)], capsys)
    assert code == 0 and err == ""


def test_a_scenario_knows_every_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (job,) = _rayjobs()
    job["metadata"]["labels"]["priorityClassName"] = "team-critical"  # type: ignore[index]
    job["metadata"]["labels"]["kai.scheduler/queue"] = "default-queue"  # type: ignore[index]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"name": "n", "gpus": 8, "count": 4}], "workloads": [{"manifest": job}]}))
    code, _, err = _run(["simulate", str(path), "--json"], capsys)
    assert code == 0
    assert "metadata.labels[priorityClassName]: 'team-critical' is not a PriorityClass (known: train, " in err


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            lambda d: _worker(d).update(replicas=0, minReplicas=0),
            "note: {label}: spec.rayClusterSpec.workerGroupSpecs: no group has replicas (gpu-workers); the gang is "
            "the head pod alone",
        ),
        (
            lambda d: _worker(d).update(groupName="GPU_Workers"),
            "note: {label}: spec.rayClusterSpec.workerGroupSpecs[0].groupName: 'GPU_Workers' is not a DNS label; "
            "its subgroup is 'gpu-workers-",
        ),
        (
            lambda d: d["metadata"].update(annotations={"kai.scheduler/staleness-grace-period": ""}),
            "warning: {label}: metadata.annotations[kai.scheduler/staleness-grace-period]: is empty",
        ),
        (
            lambda d: _worker(d)["template"].update(metadata={"annotations": {"gpu-fraction": "1e-9"}}),
            "warning: {label}: spec.rayClusterSpec.workerGroupSpecs[0].template.metadata.annotations[gpu-fraction]: "
            "'1e-9' is less than 1 MiB",
        ),
    ],
)
def test_podgroup_says_what_a_legal_but_surprising_gang_became(
    change: object, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _variant(tmp_path, change)
    code, out, err = _run(["podgroup", "-f", str(path)], capsys)
    assert code == 0 and "kind: PodGroup" in out
    assert f"kai-ray: {line.format(label=f'{path} document 1 (RayJob llm-finetune)')}" in err, err
