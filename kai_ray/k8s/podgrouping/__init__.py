"""The podgrouper operator: Ray CRs and pods -> PodGroups and pod stamps, one job per module.

- ``operator``: the wiring, leadership and the work queue;
- ``watches``: the informers (pods of our scheduler, PodGroups, the Ray kinds, KubeRay's submitter Jobs);
- ``owners``: owner chains from a pod up to its top owner (Pod -> RayCluster -> RayJob/RayService, through a batch
  Job for a RayJob's submitter);
- ``ray_gangs``: the PodGroup a Ray top owner should have, and the Events saying why one cannot be built;
- ``ray_reconcile``: a Ray object's PodGroup kept up to date, and what its gang became told in Events;
- ``pod_reconcile``: a pod's PodGroup, then its stamp; ``pod_stamps``: the stamp, now or deferred when it may wait;
- ``orphans``: stand-in PodGroups for objects whose owner cannot be found, and their adoption once it is;
- ``podgroup_writer``: the writes, as the installed CRD stores them; ``upstream_writer``: their upstream twins
  (``--upstream-gangs``);
- ``problems``: what is wrong with an object, told once per distinct message; ``work``: the work queue's keys;
- ``webhook``: the admission decision for new Ray pods and its serving; ``admission``: the HTTPS server and the
  webhook's registration; ``quotagate``: the queue-admission gate added to new pods of gating queues.

The pure rules (the Ray grouper, the ownerless-pod grouper, the PodGroup merge rules) are :mod:`kai_ray.podgrouper`.
"""
