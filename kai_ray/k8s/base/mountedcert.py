"""A serving certificate someone else issues and renews (cert-manager), read from its mounted Secret.

Why: a cluster that already runs cert-manager wants its issuer, not a CA the operator makes at each start
(:mod:`kai_ray.k8s.base.servingcert`). cert-manager writes the certificate into a Secret, the kubelet projects it
into the pod as files and swaps them when cert-manager renews it; the operator must then serve the new files without a
restart, or the API server stops trusting the webhook once the old certificate expires. The CA is not needed here:
cert-manager's CA injector writes it into the webhook configuration, which the chart owns in this mode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kai_ray.k8s.base.servingcert import ServingCert

FILES = ("tls.crt", "tls.key")


class CertDirError(Exception):
    """The directory lacks a readable ``tls.crt``/``tls.key``: the one line to say at start."""


@dataclass
class MountedCert:
    """``tls.crt`` and ``tls.key`` in ``directory``; :meth:`changed` tells when the kubelet swapped them."""

    directory: Path
    _stamp: tuple[tuple[int, int], ...] = field(default=(), init=False)

    def load(self) -> ServingCert:
        """The certificate now in the directory (``ca.crt`` when present, else empty)."""
        try:
            stamp = self._stat()
            cert, key = ((self.directory / name).read_bytes() for name in FILES)
        except OSError as exc:
            raise CertDirError(
                f"--webhook-cert-dir {self.directory}: {exc.strerror or exc} ({exc.filename}); expected "
                f"{' and '.join(FILES)}, as cert-manager's Secret mounts them"
            ) from None
        ca = self.directory / "ca.crt"
        self._stamp = stamp
        return ServingCert(ca.read_bytes() if ca.is_file() else b"", cert, key)

    def changed(self) -> bool:
        """Whether the files differ from those :meth:`load` last read (an unreadable directory: not yet)."""
        try:
            return self._stat() != self._stamp
        except OSError:
            return False

    def _stat(self) -> tuple[tuple[int, int], ...]:
        out = []
        for name in FILES:
            st = os.stat(self.directory / name)  # follows the kubelet's ..data symlink to the current files
            out.append((st.st_ino, st.st_mtime_ns))
        return tuple(out)
