"""The FGD paper's workload-inflation protocol ("Beware of Fragmentation", Weng et al., USENIX ATC'23), in one place.

- ``protocol``: one run: the arrival order, the batches, each batch one scheduling cycle of the real core.
- ``sweep``: many runs (pod lists x placement policies x seeds), in this process or as Ray tasks; the combined
  document and its plot.
- ``plan``: what a sweep runs, read from the options as typed (short list names, seed ranges), checked up front.
- ``terminal``: progress bars while it runs, then the table, the JSON and the report files.

The protocol's entry points are importable from here, as they always were.
"""

from kai_ray.sim.inflation.protocol import (
    DATA_ENV,
    DEFAULT_NODES,
    DEFAULT_PODS,
    PUBLISHED,
    InflationError,
    InflationResult,
    InflationRun,
    InflationSpec,
    arrivals,
    batches,
    check_placement,
    data_dir,
    gpu_request,
    known_placements,
    read_pod_list,
    run_inflation,
)

__all__ = [
    "DATA_ENV",
    "DEFAULT_NODES",
    "DEFAULT_PODS",
    "PUBLISHED",
    "InflationError",
    "InflationResult",
    "InflationRun",
    "InflationSpec",
    "arrivals",
    "batches",
    "check_placement",
    "data_dir",
    "gpu_request",
    "known_placements",
    "read_pod_list",
    "run_inflation",
]
