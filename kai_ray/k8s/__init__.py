"""The only part of kai-ray that talks to the Kubernetes API server.

- ``rest``: raw-JSON client over the official client's connection pool (kubeconfig, TLS, token refresh).
- ``informer``: list-then-watch caches; ``leader``: Lease-based leader election; ``workqueue``: keyed work queues;
  ``events``: de-duplicated core/v1 Events; ``metrics``: Prometheus metrics.
- ``podgrouper``: the podgrouper operator (pods and Ray CRs -> PodGroups, pod stamps); ``grouping``: its rules
  around the pure grouper (single-pod groups, what an update keeps).
- ``cache``, ``scheduler``, ``status``: the scheduler/binder operator (watches -> snapshot -> ``run_cycle`` ->
  bindings, evictions, PodGroup/Queue status, Events).
- ``kopf_app``: kopf as the operators' runtime; ``config``: their settings; ``rbac``: the permissions they use.
- ``elastic``, ``rayplan``, ``raygcs``: Ray-aware reclaim (API calls and the eviction interceptor; pure patch plans;
  draining Ray nodes); ``resume``: suspended gangs weighed and resumed; ``isolate``: per-object guards and the core's
  quarantine.
- ``explain``: ``kai-ray explain``; ``bench``: ``kai-ray bench e2e``; ``chaos``, ``fuzz``: the reliability runs
  (``kai-ray bench chaos|fuzz`` and the suite), on ``testbed`` (operator processes and workload objects).
"""
