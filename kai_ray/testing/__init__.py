"""Test tooling: the real control plane (``controlplane``), the test bed of operator processes and workloads
(``testbed``), the settings of in-process operators on that plane (``inprocess``), KAI's upstream binaries and CRDs
(``kai_upstream``), the one-cycle fixture format (``cycle_fixture``) and the real-node lane's container images
(``images``).

Not runtime code: the runtime wheel leaves this package out, and no runtime package imports it (import-linter holds
that). It is used from a checkout installed with the ``testing`` (or ``dev``) extra.
"""
