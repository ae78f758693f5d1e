"""The only part of kai-ray that talks to the Kubernetes API server, one folder per concern:

- ``base``: the plumbing both operators stand on — ``rest`` (raw-JSON client over the official client's connection
  pool), ``informer`` (list-then-watch caches), ``workqueue``, ``leader`` (Lease election), ``events``
  (de-duplicated core/v1 Events), ``metrics``, ``isolate`` (per-object guards), ``pruning``, ``rbac``.
- ``podgrouping``: the podgrouper operator (``operator``: pods and Ray CRs -> PodGroups, pod stamps) and its rules
  around the pure grouper (``grouping``).
- ``scheduling``: the scheduler/binder operator — ``cache`` (watches -> snapshot, assume/sent/forget), ``operator``
  (wiring and leadership, the cycle loop), ``dispatch`` (bindings and evictions), ``reporting`` (PodGroup/Queue
  status, Events, metrics), ``status``, ``usage`` (time-based fair share), ``resume`` (suspended gangs weighed
  against the snapshot and resumed), ``visibility`` and ``explain`` (the CLI's read-only views).
- ``ray``: Ray-aware reclaim — ``elastic`` (API calls and the eviction interceptor), ``rayplan`` (pure patch plans),
  ``raygcs`` (draining Ray nodes).
- ``kopf_app``: kopf as the operators' runtime; ``config``: their settings.

Floors: ``base`` imports nothing else of ``k8s``; ``ray`` stands on ``base``; the two operators on both.
"""
