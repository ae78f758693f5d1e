"""kopf entrypoint of the scheduler/binder: ``kopf run --standalone -A operators/scheduler.py``.

Settings come from ``KAI_RAY_*`` environment variables (see :class:`kai_ray.k8s.config.OperatorConfig`); the Helm
chart runs the equivalent ``kai-ray operator scheduler [flags]``. All logic lives in :mod:`kai_ray.k8s`.
"""

from kai_ray.k8s.config import OperatorConfig
from kai_ray.k8s.kopf_app import register

engine = register("scheduler", OperatorConfig.from_env())
