"""The embedded scheduler core: pure, deterministic, no Kubernetes/kopf/Ray imports.

Snapshot in (``snapshot``), decisions out (``decisions``); ``cycle.run_cycle`` runs KAI's actions in KAI's order
(allocate, consolidation, reclaim, preempt, stale gang eviction). See ``README.md`` in this package for the module
map and where kai-ray deliberately differs from KAI.
"""
