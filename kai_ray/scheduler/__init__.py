"""The embedded scheduler core: pure, deterministic, no Kubernetes/kopf/Ray imports.

Snapshot in (``snapshot``), decisions out (``decisions``); ``run_cycle`` runs KAI's actions in KAI's order.
"""
