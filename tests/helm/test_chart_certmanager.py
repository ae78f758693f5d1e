"""The chart's two ways to certify the podgrouper's webhook, rendered and linted with the real `helm`: the podgrouper's
own certificate and registration (default), or cert-manager's Certificate, the chart's MutatingWebhookConfiguration
with cert-manager's CA injection, and the podgrouper serving the mounted Secret (``webhook.certManager.enabled``)."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.k8s.podgrouping import admission
from tests.helm.test_chart import CHART, args_of, by_kind, helm, render, run_helm  # noqa: F401
from tests.helm.test_chart_contract import _configs

GATING = ["--set", "queueAdmissionGating=queues"]
CERT_MANAGER = ["--set", "webhook.certManager.enabled=true"]
CERT = "rel-kai-ray-podgrouper-webhook"
SERVICE = "rel-kai-ray-podgrouper-webhook"


def podgrouper(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deploy,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-podgrouper")]
    return deploy


def cert_manager_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]


def test_lint_in_both_modes(helm):  # noqa: F811
    for values in (GATING, [*GATING, *CERT_MANAGER], [*CERT_MANAGER, "--set", "podgrouper.upstreamGangs=true"]):
        out = run_helm(helm, "lint", str(CHART), "--set", "image.repository=r/kai-ray", *values)
        assert out.returncode == 0, out.stdout + out.stderr


def test_by_default_the_podgrouper_certifies_and_registers_its_webhook_itself(helm):  # noqa: F811
    docs = render(helm, *GATING)
    assert cert_manager_objects(docs) == [] and by_kind(docs, "MutatingWebhookConfiguration") == []
    deploy = podgrouper(docs)
    assert not any(a.startswith("--webhook-cert-dir") for a in args_of(deploy))
    assert "volumes" not in deploy["spec"]["template"]["spec"]
    assert [r["metadata"]["name"] for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-webhook-tls")]
    (role,) = by_kind(docs, "ClusterRole")
    assert any("mutatingwebhookconfigurations" in r["resources"] for r in role["rules"])


@pytest.mark.parametrize(
    "values,paths",
    [
        (GATING, (admission.GATE_PATH,)),
        (["--set", "podgrouper.upstreamGangs=true"], (admission.PATH,)),
        ([*GATING, "--set", "podgrouper.upstreamGangs=true"], (admission.PATH, admission.GATE_PATH)),
        ([*GATING, "--set", "watchNamespaces={ml,bio}"], (admission.GATE_PATH,)),
    ],
    ids=["gating", "upstream-gangs", "both", "namespaces"],
)
def test_cert_manager_issues_the_certificate_and_the_chart_registers_the_webhook(helm, values, paths):  # noqa: F811
    docs = render(helm, *values, *CERT_MANAGER)

    (issuer,) = by_kind(docs, "Issuer")
    assert issuer["spec"] == {"selfSigned": {}} and issuer["metadata"]["namespace"] == "kai-system"
    (cert,) = by_kind(docs, "Certificate")
    assert cert["metadata"]["name"] == CERT
    assert cert["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    # the names the API server dials: the podgrouper's default mode certifies the same ones
    assert cert["spec"]["dnsNames"] == [f"{SERVICE}.kai-system.svc", f"{SERVICE}.kai-system.svc.cluster.local"]

    (config,) = by_kind(docs, "MutatingWebhookConfiguration")
    assert config["metadata"]["name"] == admission.CONFIG_NAME
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"kai-system/{CERT}"}
    namespaces = ("ml", "bio") if "watchNamespaces={ml,bio}" in values else ()
    client = {"service": {"namespace": "kai-system", "name": SERVICE, "path": admission.PATH, "port": 443}}
    own = admission.webhook_configuration(client, b"", namespaces, paths)  # what the podgrouper would register
    for webhook in own["webhooks"]:
        del webhook["clientConfig"]["caBundle"]  # cert-manager's CA injector writes it
    assert config["webhooks"] == own["webhooks"]

    deploy = podgrouper(docs)
    pod = deploy["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    parsed = _configs(docs)["podgrouper"]  # the real parser, as the container would run
    assert parsed.webhook_cert_dir == mount["mountPath"] and parsed.webhook_service == SERVICE

    # the podgrouper makes no Secret and registers nothing: neither is granted
    assert not [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-webhook-tls")]
    (role,) = by_kind(docs, "ClusterRole")
    assert not any("mutatingwebhookconfigurations" in r["resources"] for r in role["rules"])


def test_an_issuer_of_ones_own_replaces_the_self_signed_one(helm):  # noqa: F811
    docs = render(
        helm,
        *GATING,
        *CERT_MANAGER,
        "--set",
        "webhook.certManager.issuerRef.name=corp-ca",
        "--set",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
    )
    assert by_kind(docs, "Issuer") == []
    (cert,) = by_kind(docs, "Certificate")
    assert cert["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_cert_manager_without_a_webhook_renders_nothing_of_it(helm):  # noqa: F811
    docs = render(helm, *CERT_MANAGER)
    assert cert_manager_objects(docs) == [] and by_kind(docs, "MutatingWebhookConfiguration") == []
    assert "volumes" not in podgrouper(docs)["spec"]["template"]["spec"]


def test_schema_rejects_an_issuer_kind_cert_manager_does_not_have(helm):  # noqa: F811
    out = run_helm(helm, "template", "rel", str(CHART), *CERT_MANAGER, "--set", "webhook.certManager.issuerRef.kind=CA")
    assert out.returncode != 0 and "kind" in out.stderr
