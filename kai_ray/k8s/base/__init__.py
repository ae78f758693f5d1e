"""API plumbing both operators stand on; imports nothing else of ``kai_ray.k8s``."""
