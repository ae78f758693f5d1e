"""Which ``resource.k8s.io`` version the scheduler operator reads and writes, found by discovery.

Real: two kube-apiservers of the tested release, one as shipped (DRA GA, ``v1`` served by default) and one with ``v1``
turned off and ``v1beta2`` on (``--runtime-config=resource.k8s.io/v1=false,resource.k8s.io/v1beta2=true``), the shape
a cluster older than 1.34 (v1beta1/v1beta2 only) presents. On the second the store falls back to v1beta2, says so in
one log line, watches the v1beta2 objects and writes a claim's allocation through v1beta2.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from kai_ray.k8s.base.rest import Kube
from kai_ray.k8s.scheduling import dra_claims
from kai_ray.scheduler.device_ledger import ClaimAllocation
from kai_ray.testing.controlplane.harness import ControlPlane
from tests.k8s.helpers import wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.dra]

V1BETA2 = "resource.k8s.io/v1beta2"


@pytest.fixture(scope="module")
def beta_kube() -> Iterator[Kube]:
    with ControlPlane(
        kwok=False, apiserver_extra_args=["--runtime-config=resource.k8s.io/v1=false,resource.k8s.io/v1beta2=true"]
    ) as cp:
        k = Kube(cp.api_client())
        yield k
        k.close()


def test_the_shipped_apiserver_serves_v1_and_the_store_reads_it(kube: Kube) -> None:
    assert dra_claims.served_version(kube) == dra_claims.VERSION == "resource.k8s.io/v1"


def test_without_v1_the_store_falls_back_to_v1beta2_says_so_and_allocates_through_it(
    beta_kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    kube = beta_kube
    store = dra_claims.DraStore()
    with caplog.at_level(logging.INFO, logger=dra_claims.__name__):
        informers = store.informers(kube)
    assert store.version == V1BETA2
    lines = [r.getMessage() for r in caplog.records if r.name == dra_claims.__name__]
    assert lines == [f"DRA: the API server does not serve resource.k8s.io/v1; falling back to {V1BETA2}"]
    kube.create(
        f"/apis/{V1BETA2}/resourceslices",
        {
            "apiVersion": V1BETA2,
            "kind": "ResourceSlice",
            "metadata": {"name": "n1-gpus"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}],
            },
        },
    )
    kube.create("/api/v1/namespaces", {"metadata": {"name": "dra-beta"}})
    kube.create(
        f"/apis/{V1BETA2}/namespaces/dra-beta/resourceclaims",
        {
            "apiVersion": V1BETA2,
            "kind": "ResourceClaim",
            "metadata": {"name": "c"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        },
    )
    for inf in informers:
        inf.start()
    try:
        wait_until("the v1beta2 slice and claim in the store", lambda: len(store.catalog().api_claims) == 1, 60)
        assert [dev.id for dev in store.catalog().devices] == ["gpu.nvidia.com/n1/gpu-0"]
        alloc = ClaimAllocation("dra-beta/c", "n1", (("gpu", "gpu.nvidia.com/n1/gpu-0"),))
        dra_claims.reserve(kube, store, "dra-beta", "p", "uid-p", (alloc,))
    finally:
        for inf in informers:
            inf.stop()
    claim = kube.get(f"/apis/{V1BETA2}/namespaces/dra-beta/resourceclaims/c")
    assert claim["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
    ]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == ["uid-p"]
