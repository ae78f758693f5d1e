"""The only part of kai-ray that talks to the Kubernetes API server, one folder per concern:

- ``base``: the plumbing both operators stand on — ``rest`` (raw-JSON client over the official client's connection
  pool), ``informer`` (list-then-watch caches), ``workqueue``, ``leader`` (Lease election), ``events``
  (de-duplicated core/v1 Events), ``metrics``, ``isolate`` (per-object guards), ``pruning``, ``rbac``, ``slim``
  (pods kept as both operators read them), ``shared`` (watched objects' repeated strings and parts held once),
  ``collector`` (the cyclic collector kept off long-lived objects), ``servingcert`` and ``mountedcert`` (the
  webhook's certificate, made at start or mounted from cert-manager's Secret).
- ``podgrouping``: the podgrouper operator (``operator`` wires owner chains, Ray and pod reconciles, deferred
  stamps, orphan adoption, the PodGroup writer and the admission webhook: pods and Ray CRs -> PodGroups, pod stamps);
  its pure rules (owners followed, the ownerless-pod grouper, the PodGroup merge rules) are
  :mod:`kai_ray.podgrouper.defaultgrouper`.
- ``scheduling``: the scheduler/binder operator — ``entries`` (watched objects read once), ``cache`` (watches ->
  snapshot, assume/sent/forget) with ``changes`` (what changed since the last cycle, for the incremental session),
  ``assembly`` (builds a replica's parts), ``operator`` (leadership, the cycle loop), ``dispatch`` (bindings,
  evictions, max-pending actions) with ``rayvictims`` (victim records for the Ray path), ``maxpending``,
  ``release_binds`` and ``release_watch`` (a preemptor bound as its victims leave),
  ``ungate`` (the queue-admission gate lifted), ``podcondition`` (``PodScheduled=False`` for node autoscalers),
  ``reporting`` (PodGroup/Queue status, Events, metrics), ``cyclemetrics``, ``status``, ``resume`` (suspended gangs
  weighed against the snapshot and resumed), ``rayactivity``, ``dra_claims`` (ResourceClaims), ``upstream_gangs``
  (``scheduling.k8s.io`` PodGroups), ``watched`` (what the informers keep of pods, nodes and PodGroups),
  ``cluster_views`` and ``pod_explanation`` (the CLI's read-only views).
- ``ray``: Ray-aware reclaim — ``victims`` (victim records in, typed outcomes out), ``ray_reclaim`` (the Ray path of the
  scheduler's victims), ``elastic`` (the API calls: shrink, suspend, resume), ``rayplan`` (pure patch plans),
  ``raygcs`` and ``drainfirst`` (draining Ray nodes); and ``headroom_publisher`` (what Ray's autoscaler may still ask
  for).
- ``kopf_app``: kopf as the operators' runtime; ``engines``: the engine each operator runs, started while kopf is
  imported; ``config``: their settings; ``usagedb``: time-based fair share's
  usage sources (KAI's usageDBConfig: none, internal, Prometheus).

Floors (import-linter holds them): ``base`` imports nothing else of ``k8s``; ``ray`` and ``usagedb`` sit above it,
``config`` above those, and the two operators above ``config``, never importing each other.
"""
