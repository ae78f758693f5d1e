"""``python -m kai_ray.autoscaler``: see :mod:`kai_ray.autoscaler.entrypoint`."""

from kai_ray.autoscaler.entrypoint import main

raise SystemExit(main())
