"""Throw-away PKI for the test control plane: a CA, an apiserver serving cert and a service-account key.

Why our own: there is no kubeadm or openssl dependency here, and each control plane gets fresh keys so a leaked test
kubeconfig is worthless once the run ends. ECDSA for TLS (fast to generate); RSA for the service-account key because
that is what kube-apiserver documents for ``--service-account-key-file``.

``cryptography`` is test tooling (the ``testing`` extra), imported only when a control plane starts, so the runtime
install (and the operator image) does not carry it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kai_ray.extras import missing_extra

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

SERVING_IPS = ("127.0.0.1", "10.0.0.1")
SERVING_DNS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def generate(directory: Path, days: int = 7, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Write a CA, a serving cert (SANs 127.0.0.1, localhost, 10.0.0.1 and ``extra_ips``), the apiserver's client
    cert for kubelets (``system:masters``: what ``kubectl logs``/``exec`` go through on a real node) and an RSA SA key
    pair into ``directory``."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ModuleNotFoundError as exc:
        raise (missing_extra(exc, "the test control plane's PKI") or exc) from None
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kai-ray-test-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = ec.generate_private_key(ec.SECP256R1())
    ips = dict.fromkeys((*SERVING_IPS, *extra_ips))
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    sans += [x509.DNSName(name) for name in SERVING_DNS]
    srv_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    kc_key = ec.generate_private_key(ec.SECP256R1())
    kc_cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client"),
                ]
            )
        )
        .issuer_name(ca_name)
        .public_key(kc_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    return Pki(
        ca_cert=_write(directory / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM)),
        ca_key=_write(directory / "ca.key", _pem_key(ca_key)),
        serving_cert=_write(directory / "serving.crt", srv_cert.public_bytes(serialization.Encoding.PEM)),
        serving_key=_write(directory / "serving.key", _pem_key(srv_key)),
        sa_key=_write(directory / "sa.key", _pem_key(sa_key)),
        sa_pub=_write(directory / "sa.pub", sa_pub),
        kubelet_client_cert=_write(directory / "kubelet-client.crt", kc_cert.public_bytes(serialization.Encoding.PEM)),
        kubelet_client_key=_write(directory / "kubelet-client.key", _pem_key(kc_key)),
    )
