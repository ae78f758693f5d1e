"""A Ray driver that asks the autoscaler for more GPUs than may be granted, and reports what it gets.

``python ask.py --gpus 4`` calls ``ray.autoscaler.sdk.request_resources`` for that many one-GPU bundles, then prints
one JSON line ``{"t": <unix time>, "gpus": <GPUs of the live Ray nodes>}`` each time the cluster's GPUs change, until
``--seconds`` have passed. With kai-ray's hook in the autoscaler the count stops at what the queue has room for.
"""

from __future__ import annotations

import argparse
import json
import time

import ray
from ray.autoscaler.sdk import request_resources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4, help="one-GPU bundles to ask for")
    parser.add_argument("--seconds", type=float, default=3600.0, help="how long to keep reporting")
    args = parser.parse_args()
    ray.init()
    request_resources(bundles=[{"GPU": 1}] * args.gpus)
    last = None
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus != last:
            print(json.dumps({"t": round(time.time(), 3), "gpus": gpus}), flush=True)
            last = gpus
        time.sleep(0.5)


if __name__ == "__main__":
    main()
