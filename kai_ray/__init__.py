"""kai-ray: KAI Scheduler semantics (gang PodGroups, hierarchical queues, fair share, preemption) for Ray on
Kubernetes."""

__version__ = "0.1.0"
