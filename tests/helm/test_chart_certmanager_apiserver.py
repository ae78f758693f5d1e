"""The chart's cert-manager mode against the real API server: the Issuer, Certificate and MutatingWebhookConfiguration
it renders pass a server-side dry run (strict field validation) with cert-manager's own CRDs installed (from its Go
module, pinned in ``build.CERT_MANAGER_VERSION``). What is not run: cert-manager itself (issuing, CA injection)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kai_ray.k8s.base.rest import ApiError, Kube
from kai_ray.testing.controlplane.crds import cert_manager_crd_files
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.helm.test_chart import by_kind, helm, render  # noqa: F401

pytestmark = pytest.mark.controlplane

CERT_MANAGER = ("--set", "webhook.certManager.enabled=true")
PATHS = {
    "Issuer": "/apis/cert-manager.io/v1/namespaces/{ns}/issuers",
    "Certificate": "/apis/cert-manager.io/v1/namespaces/{ns}/certificates",
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
}


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    control_plane.apply_crds(cert_manager_crd_files())
    k = Kube(control_plane.api_client())
    yield k
    k.close()


def dry_run(kube: Kube, ns: str, doc: dict[str, Any]) -> dict[str, Any]:
    path = PATHS[doc["kind"]].format(ns=ns)
    return dict(kube.request("POST", path, query={"dryRun": "All", "fieldValidation": "Strict"}, body={**doc}))


@pytest.mark.parametrize(
    "extra",
    [
        [],
        [
            "--set",
            "webhook.certManager.issuerRef.name=corp-ca",
            "--set",
            "webhook.certManager.issuerRef.kind=ClusterIssuer",
        ],
    ],
    ids=["self-signed", "own-issuer"],
)
def test_what_the_cert_manager_mode_renders_is_accepted_by_the_api_server(
    helm: Any,  # noqa: F811
    kube: Kube,
    namespace: str,
    extra: list[str],
) -> None:
    docs = render(
        helm,
        "--namespace",
        namespace,
        "--set",
        "queueAdmissionGating=queues",
        "--set",
        "podgrouper.upstreamGangs=true",
        "--set",
        "webhook.certManager.enabled=true",
        *extra,
    )
    objects = [d for kind in PATHS for d in by_kind(docs, kind)]
    assert {d["kind"] for d in objects} == set(PATHS) - ({"Issuer"} if extra else set())
    for doc in objects:
        got = dry_run(kube, namespace, doc)
        assert got["kind"] == doc["kind"] and got["metadata"]["name"] == doc["metadata"]["name"]
        if doc["kind"] == "Certificate":
            assert got["spec"]["dnsNames"] == doc["spec"]["dnsNames"]
            assert got["spec"]["issuerRef"] == doc["spec"]["issuerRef"]
        if doc["kind"] == "MutatingWebhookConfiguration":
            assert [w["name"] for w in got["webhooks"]] == [w["name"] for w in doc["webhooks"]]
            assert got["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].startswith(f"{namespace}/")


def test_the_dry_run_would_catch_a_field_cert_manager_does_not_know(
    helm: Any,  # noqa: F811
    kube: Kube,
    namespace: str,
) -> None:
    """The control: the CRDs' schemas are live and strict, so the test above proves something."""
    docs = render(helm, "--namespace", namespace, "--set", "queueAdmissionGating=queues", *CERT_MANAGER)
    (cert,) = by_kind(docs, "Certificate")
    cert["spec"]["dnsName"] = cert["spec"].pop("dnsNames")
    with pytest.raises(ApiError) as err:
        dry_run(kube, namespace, cert)
    assert "dnsName" in str(err.value)
