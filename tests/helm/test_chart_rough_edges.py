"""The chart's rough edges a first install hits: a placeholder image, Leases shared by two releases, NOTES that
promise a column only ``-o wide`` shows, a Dockerfile pointing at a section that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.helm.test_chart import CHART, args_of, by_kind, helm, render, run_helm  # noqa: F401

ROOT = CHART.parents[1]


def test_an_install_without_an_image_fails_with_a_message(helm: Path) -> None:  # noqa: F811
    out = run_helm(helm, "template", "rel", str(CHART), image=False)
    assert out.returncode != 0
    assert "image.repository is required" in out.stderr and "operators/Dockerfile" in out.stderr
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == ""


def test_leases_are_named_after_the_release(helm: Path) -> None:  # noqa: F811
    leases = {}
    for release in ("one", "two"):
        out = run_helm(helm, "template", release, str(CHART))
        assert out.returncode == 0, out.stderr
        for d in by_kind([d for d in yaml.safe_load_all(out.stdout) if d], "Deployment"):
            names = [a.split("=", 1)[1] for a in args_of(d) if a.startswith("--lease-name=")]
            assert len(names) == 1, d["metadata"]["name"]
            leases[d["metadata"]["name"]] = names[0]
    assert leases == {
        "one-kai-ray-podgrouper": "one-kai-ray-podgrouper",
        "one-kai-ray-scheduler": "one-kai-ray-scheduler",
        "two-kai-ray-podgrouper": "two-kai-ray-podgrouper",
        "two-kai-ray-scheduler": "two-kai-ray-scheduler",
    }
    docs = render(helm, "--set", "leaderElection.leaseName=custom")
    sched = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-scheduler"))
    assert "--lease-name=custom" in args_of(sched)


def test_notes_ask_for_the_wide_columns_they_promise() -> None:
    crd = yaml.safe_load((CHART / "crds" / "scheduling.run.ai_queues.yaml").read_text())
    columns = {c["name"]: c.get("priority", 0) for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["GPU-Requested"] > 0  # shown only with -o wide
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    line = next(x for x in notes.splitlines() if "kubectl get queues" in x)
    assert "-o wide" in line


def test_the_dockerfile_points_at_a_section_that_exists() -> None:
    dockerfile = (ROOT / "operators" / "Dockerfile").read_text()
    doc, section = re.search(r"\((\S+\.md), \"([^\"]+)\"\)", dockerfile).groups()  # type: ignore[union-attr]
    headings = re.findall(r"^#+ (.+)$", (ROOT / doc).read_text(), flags=re.M)
    assert section in headings


def test_the_schema_refuses_what_the_operators_would_and_takes_what_they_take(helm: Path) -> None:  # noqa: F811
    refused = {
        ("--set", "schedulerName=Kai_Sched"): "at '/schedulerName'",  # pods would be refused: not DNS-1123
        ("--set", "mode=kai-coexistence", "--set", "scheduler.nodePools[0].name=a"): "at '/scheduler/nodePools'",
    }
    for args, where in refused.items():
        out = run_helm(helm, "template", "rel", str(CHART), *args)
        assert out.returncode != 0 and where in out.stderr, (args, out.stderr)
    for args in (("--set", "scheduler.preemptionDelay=2d"), ("--set", "schedulerName=kai.scheduler-2")):
        out = run_helm(helm, "template", "rel", str(CHART), *args)
        assert out.returncode == 0, (args, out.stderr)
