"""Put kai-ray's autoscaler hook into Ray's autoscaler when the interpreter starts, where ``KAI_RAY_AUTOSCALER=1``.

KubeRay before 1.7 has no ``autoscalerOptions.command``: its sidecar always runs ``ray kuberay-autoscaler``. Python
imports ``sitecustomize`` from ``PYTHONPATH`` at start, so mounting this file into the autoscaler container (and
setting both variables there only) makes that command build kai-ray's providers, which cap every scale-up at the
headroom kai-ray's scheduler publishes for the queue. Every other container ignores it.
"""

import os

if os.environ.get("KAI_RAY_AUTOSCALER") == "1":
    from kai_ray.autoscaler.entrypoint import install

    install()
