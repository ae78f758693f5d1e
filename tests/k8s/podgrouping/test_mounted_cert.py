"""The podgrouper's webhook serving a certificate cert-manager issues: read from the mounted Secret's files, and served
anew when the kubelet swaps them (a renewal), over real TLS handshakes.

The directory is laid out as the kubelet projects a Secret: the files are symlinks through ``..data`` to a timestamped
directory, and an update swaps ``..data`` in one rename."""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kai_ray.k8s.base.mountedcert import MountedCert
from kai_ray.k8s.base.servingcert import ServingCert, make_serving_cert
from kai_ray.k8s.podgrouping.admission import AdmissionServer
from tests.k8s.helpers import wait_until


def project(directory: Path, cert: ServingCert, version: str) -> None:
    """Write ``cert`` as the kubelet writes a Secret volume's new contents."""
    data = directory / f"..{version}"
    data.mkdir()
    for name, pem in (("tls.crt", cert.cert_pem), ("tls.key", cert.key_pem), ("ca.crt", cert.ca_pem)):
        (data / name).write_bytes(pem)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(data.name)
    os.replace(tmp, directory / "..data")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


def served(port: int) -> bytes:
    """The certificate the server presents in a fresh handshake (DER)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der(cert: ServingCert) -> bytes:
    return x509.load_pem_x509_certificate(cert.cert_pem).public_bytes(Encoding.DER)


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    first, renewed = make_serving_cert(["127.0.0.1"]), make_serving_cert(["127.0.0.1"])
    project(tmp_path, first, "1")
    mounted = MountedCert(tmp_path)
    server = AdmissionServer({}, mounted.load(), bind="127.0.0.1", port=0, mounted=mounted, reload_every=0.1).start()
    try:
        assert served(server.port) == der(first)
        project(tmp_path, renewed, "2")
        wait_until("the renewed certificate in a new handshake", lambda: served(server.port) == der(renewed), 30)
        assert server.reloads == 1

        # a key that does not match the certificate (a half-written renewal) is not taken: the renewed one stays
        broken = ServingCert(b"", renewed.cert_pem, first.key_pem)
        project(tmp_path, broken, "3")
        wait_until("the broken pair to be seen", lambda: not mounted.changed(), 30)
        assert served(server.port) == der(renewed) and server.reloads == 1
    finally:
        server.stop()
