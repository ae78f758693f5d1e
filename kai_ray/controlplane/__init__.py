"""A real Kubernetes control plane for tests and benchmarks, built from Go modules.

Nothing here is used by the scheduler core; it exists so the operators can be proven against a real
kube-apiserver + etcd (with KWOK nodes) on a machine with no Docker engine.
"""
