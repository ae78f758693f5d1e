"""A real Kubernetes control plane for tests and benchmarks, built from Go modules.

Nothing here is used by the scheduler core or the operators; it exists so the operators can be proven against a real
kube-apiserver + etcd (with KWOK nodes) on a machine with no Docker engine. It is test tooling: its PKI needs
``cryptography`` from the ``testing`` extra, imported only when a control plane starts, so the runtime install and the
operator image do not carry it (the import path stays, for the tests and ``kai-ray bench e2e``).
"""
