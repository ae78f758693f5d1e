"""Which engine each operator runs, and starting it before the runtime that hosts it.

Why apart from :mod:`kai_ray.k8s.kopf_app`: importing kopf (with aiohttp, and the ``kubernetes`` client it looks
for) is the largest part of an operator's start-up. An engine built and started first lists its informers while
that import runs; the lists mostly wait on the API server, on another core. ``kai-ray bench failover`` times the
start-up: the engine is built about 0.4 s sooner, but under the benchmark's own load the lists slow down while kopf
loads, and the first binding came within the machine's spread of before (``docs/benchmarks.md``).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any, Protocol

from kai_ray.k8s.config import OperatorConfig

KINDS = ("podgrouper", "scheduler")


class Engine(Protocol):
    kube: Any

    def start(self) -> Any: ...

    def stop(self, release: bool = True) -> None: ...

    def health(self) -> dict[str, Any]: ...


def make_engine(kind: str, config: OperatorConfig) -> Engine:
    if kind == "scheduler":
        from kai_ray.k8s.scheduling.operator import build_scheduler

        return build_scheduler(config)
    if kind == "podgrouper":
        from kai_ray.k8s.podgrouping.operator import PodgrouperOperator

        return PodgrouperOperator(config)
    raise ValueError(f"unknown operator {kind!r}: expected one of {', '.join(KINDS)}")


def start_early(kind: str, config: OperatorConfig) -> tuple[Engine, bool]:
    """Operator ``kind``'s engine, and whether it was started: it is when the API server answers (otherwise the
    runtime starts it once the server is reachable, with one retry loop). Until the runtime installs its own signal
    handlers, SIGTERM ends the process through ``SystemExit`` (as SIGINT does through ``KeyboardInterrupt``), so
    whoever started the engine stops it, handing its Lease over, on the way out."""
    engine = make_engine(kind, config)
    if not engine.kube.reachability.check():
        return engine, False
    signal.signal(signal.SIGTERM, _exit)
    engine.start()
    return engine, True


def _exit(signum: int, _frame: FrameType | None) -> None:
    sys.exit(128 + signum)
