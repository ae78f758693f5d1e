"""A self-signed CA and a serving certificate for the operators' admission webhook, made at start.

Why the default is the operator's own: the API server calls a webhook only over TLS it trusts, and the certificate
must name the address the API server dials. An operator that makes its own CA at start and writes it into its webhook
configuration's ``caBundle`` needs nothing installed beside it and rotates on every restart (KAI's and Kueue's
operators do the same with their internal rotators). A cluster with cert-manager can use it instead
(:mod:`kai_ray.k8s.base.mountedcert`, the chart's ``webhook.certManager``). ``cryptography`` is the library every
Python TLS stack uses.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kai_ray.k8s.base.rest import ApiError, Kube


@dataclass(frozen=True)
class ServingCert:
    """PEM bytes: the CA (for ``caBundle``), the serving certificate and its key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_serving_cert(hosts: list[str], days: int = 365) -> ServingCert:
    """A CA and a certificate it signs for ``hosts`` (DNS names or IP addresses)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("kai-ray-webhook-ca"))
        .issuer_name(_name("kai-ray-webhook-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0] if hosts else "kai-ray-webhook"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCert(
        ca.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def shared_serving_cert(kube: Kube, namespace: str, secret: str, hosts: list[str]) -> ServingCert:
    """The certificate every replica serves: read from Secret ``secret``, or made and stored there by the first
    replica to start (a create that loses the race reads the winner's)."""
    path = f"/api/v1/namespaces/{namespace}/secrets/{secret}"
    for _ in range(3):
        try:
            data = (kube.get(path) or {}).get("data") or {}
            if {"ca.crt", "tls.crt", "tls.key"} <= set(data):
                return ServingCert(*(base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")))
        except ApiError as exc:
            if not exc.not_found:
                raise
        made = make_serving_cert(hosts)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret, "labels": {"app.kubernetes.io/managed-by": "kai-ray"}},
            "type": "kubernetes.io/tls",
            "data": {
                k: base64.b64encode(v).decode()
                for k, v in (("ca.crt", made.ca_pem), ("tls.crt", made.cert_pem), ("tls.key", made.key_pem))
            },
        }
        try:
            kube.create(f"/api/v1/namespaces/{namespace}/secrets", body)
            return made
        except ApiError as exc:
            if not exc.conflict:
                raise
    raise RuntimeError(f"Secret {namespace}/{secret}: no usable serving certificate after 3 tries")
